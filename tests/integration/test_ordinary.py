"""hangdoc on ordinary training jobs (tests/ordinary): library defaults, quiet ends, injected faults.

A slice of the matrix that `python -m benchmarks.bench_matrix` runs in full: each test starts a
real torchrun job written the way users write them, lets hangdoc diagnose it and checks what
the user sees. The jobs know nothing of hangdoc; faults come from tests/ordinary/faults.
"""
from __future__ import annotations

import pytest

from ordinary.matrix import FAULTS, HEALTHY, JOBS, CellResult, run_cell

pytestmark = [pytest.mark.integration]


def cell(job: str, fault, mode: str) -> CellResult:
    missing = JOBS[job].missing()
    if missing:
        pytest.skip(f"{job} needs {', '.join(missing)}, which is not installed (pip install -e '.[test]')")
    result = run_cell(JOBS[job], fault, mode)
    if result.status == "INVALID":
        pytest.fail("the job itself did not do what the cell needs:\n" + result.describe())
    return result


@pytest.mark.timeout(180)
def test_plain_ddp_with_dataloader_defaults_ends_healthy_under_run():
    # GIVEN a plain DDP job at DataLoader defaults (workers forked anew every epoch) that
    # prints nothing and ends well
    # WHEN it runs under `hangdoc run`
    result = cell("plain_ddp", HEALTHY, "run")
    # THEN exit 0, verdict healthy, and no critical finding about its workers coming and going
    assert result.exit_code == 0, result.describe()
    assert result.verdict == "healthy", result.describe()
    assert result.critical == [], result.describe()


@pytest.mark.timeout(240)
def test_lightning_job_watched_mid_run_is_healthy_when_it_ends():
    # GIVEN a PyTorch Lightning ddp job on CPU that has started training
    # WHEN `hangdoc watch` attaches to its torchrun launcher mid-run and the job ends by itself
    result = cell("lightning_ddp", HEALTHY, "watch")
    # THEN hangdoc exits 0 with verdict healthy and nothing critical
    assert (result.exit_code, result.verdict) == (0, "healthy"), result.describe()
    assert result.critical == [], result.describe()


@pytest.mark.timeout(300)
def test_deadlocked_worker_in_plain_ddp_is_a_hang_of_its_rank():
    # GIVEN a plain DDP job whose rank-1 DataLoader worker took a lock twice (the injector)
    # WHEN `hangdoc watch` attaches after the deadlock began
    result = cell("plain_ddp", FAULTS["worker_futex"], "watch")
    # THEN a hang (exit 3) with rank 1 named and a data-side rule as the reason
    assert (result.exit_code, result.verdict) == (3, "hang"), result.describe()
    assert result.culprits == [1], result.describe()
    assert {"worker-deadlock", "dataloader-stall"} & set(result.rules), result.describe()


@pytest.mark.timeout(180)
def test_rank_killed_by_sigkill_is_a_crash_of_that_rank_with_its_cause():
    # GIVEN a plain DDP job whose rank 1 is SIGKILLed after 20 steps (the injector)
    # WHEN it runs under `hangdoc run`
    result = cell("plain_ddp", FAULTS["kill9"], "run")
    # THEN a crash (exit 4) with rank 1 as the culprit
    assert (result.exit_code, result.verdict) == (4, "crash"), result.describe()
    assert result.culprits == [1], result.describe()
    # and the report says how it died (torchrun printed "Signal 9 (SIGKILL) received")
    said = " ".join(result.cause + [f["title"] + " " + " ".join(f["evidence"]) for f in result.findings])
    assert "SIGKILL" in said or "signal 9" in said.lower(), result.describe()
