"""`make bench` holds the headline figures against the stored baseline (benchmarks/headline.py)."""
from __future__ import annotations

import json

from benchmarks import headline


def baseline(**figures) -> dict:
    return {"machine": headline.machine(), "figures": figures}


def test_a_figure_more_than_a_quarter_worse_fails_the_bench_and_names_itself():
    # GIVEN a baseline and a run whose steady watch round costs 30 % more, the rest 20 % more
    then = baseline(watch_2x4_round_ms=50.0, report_65536_wall_s=2.0)
    now = {"watch_2x4_round_ms": 65.0, "report_65536_wall_s": 2.4}
    # WHEN compared
    code, lines = headline.check(now, then)
    # THEN the bench fails on the round alone, saying by how much
    assert code == 1
    worse = [line for line in lines if line.startswith("REGRESSION")]
    assert len(worse) == 1 and "watch_2x4_round_ms" in worse[0] and "30 % worse" in worse[0], lines


def test_figures_within_the_tolerance_pass_and_a_figure_the_baseline_lacks_is_not_compared():
    # GIVEN a baseline without the round figure (an older one) and a run within 25 % on the rest
    then = baseline(watch_2x4_core_pct=4.0)
    now = {"watch_2x4_core_pct": 4.9, "watch_2x4_round_ms": 500.0}
    # WHEN compared THEN it passes
    code, lines = headline.check(now, then)
    assert code == 0 and lines[-1].startswith("every figure within 25 %"), lines


def test_the_stored_baseline_names_its_machine_and_holds_every_headline_figure():
    # GIVEN the committed baseline WHEN read THEN it says where it was measured and why, and holds
    # every figure the bench measures (a figure added to the bench is added to the baseline)
    stored = json.loads(headline.BASELINE.read_text())
    assert {"arch", "cores", "cpu"} <= set(stored["machine"]) and stored["why"]
    assert set(stored["figures"]) == set(headline.FIGURES)
