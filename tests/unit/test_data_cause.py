"""A data-bound job's cause, named by a finding, in the verdict's headline (render/words.py)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from hangdoc.bundle.files import load_bundle
from hangdoc.model import Finding, Severity
from hangdoc.render.words import slow_headline
from hangdoc.report import judge


def test_a_slow_verdict_s_headline_carries_the_data_cause_a_finding_names():
    # GIVEN a real data-bound straggler (golden workers-unpinned: rank 0 waits on its DataLoader)
    report = judge(load_bundle(Path(__file__).parents[1] / "golden" / "workers-unpinned" / "bundle.json")).report
    assert "data-bound" not in slow_headline(report)
    # WHEN a finding names what makes it data-bound
    named = Finding("workers-cpu-confined", Severity.WARNING, (0,), "t", ("e",), "f", cause="workers confined to CPU 0")
    # THEN the straggler's headline says it
    headline = slow_headline(dataclasses.replace(report, findings=report.findings + (named,)))
    assert headline.startswith("SLOW: rank 0 is the straggler (data-bound: workers confined to CPU 0): "), headline
