"""The fr-straggler scenario: a real gloo job with TORCH_FR_BUFFER_SIZE whose ranks dump their
Flight Recorder when the fault begins; the report names the sequence number and the missing rank."""
from __future__ import annotations

import re

import pytest

from hangdoc.scenarios import SCENARIOS
from hangdoc.scenarios.evaluate import evaluate

pytestmark = [pytest.mark.integration]


@pytest.mark.timeout(200)
def test_the_report_names_the_collective_rank_1_never_issued(tmp_path):
    # GIVEN rank 1 loops in heavy_compute() while rank 0 enters the gradient all_reduce, FR on
    scenario = SCENARIOS["fr-straggler"]
    # WHEN it runs under `hangdoc run` until the verdict
    result = evaluate(scenario, tmp_path, hang_after=6.0, interval=0.5, timeout=150.0)
    # THEN the dumps the ranks wrote to TORCH_FR_DUMP_TEMP_FILE are read and cited
    assert (result.verdict, result.culprits) == ("hang", (1,))
    fr = next(f for f in result.report.findings if f.rule == "flight-recorder")
    assert re.fullmatch(r"Rank 1 never issued all_reduce #\d+ of the default group, which rank 0 entered", fr.title)
    seq = int(re.search(r"#(\d+)", fr.title).group(1))
    assert f"FR: rank 0 entered all_reduce #{seq} of the default group, rank 1 never did; " \
           f"its last completed collective was #{seq - 1}" in fr.evidence
    assert sorted((tmp_path).glob("fr_trace_rank_*")) == [tmp_path / "fr_trace_rank_0", tmp_path / "fr_trace_rank_1"]
