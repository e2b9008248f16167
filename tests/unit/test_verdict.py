"""The final verdict, one outcome at a time: hangdoc/report/verdict.py is the only place a verdict
becomes final and the one map from a verdict to an exit code (docs/exit-codes.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangdoc.base.errors import (
    EXIT_CRASH, EXIT_ENDED_UNKNOWN, EXIT_HANG, EXIT_OK, EXIT_SIGINT, EXIT_SUSPECT, EXIT_USAGE,
)
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Report, StopReason, Verdict
from hangdoc.render.json import report_json
from hangdoc.render.markdown import report_markdown
from hangdoc.report import build_report, report_without_ranks
from hangdoc.report import verdict

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.mark.parametrize("word, code", [
    (Verdict.HANG, EXIT_HANG), (Verdict.CRASH, EXIT_CRASH), (Verdict.ENDED, EXIT_ENDED_UNKNOWN),
    (Verdict.INTERRUPTED, EXIT_SIGINT), (Verdict.SUSPECT, EXIT_SUSPECT), (Verdict.HEALTHY, EXIT_OK),
])
def test_every_verdict_has_its_exit_code(word, code):
    # GIVEN a verdict WHEN watch or report exits on it THEN its code is the documented one
    assert verdict.exit_code(word) == code
    assert verdict.exit_code(word.value) == code


def test_every_verdict_is_mapped():
    # GIVEN the vocabulary WHEN a new verdict is added THEN it must get an exit code here
    assert {verdict.exit_code(v) for v in Verdict} and all(v in verdict._EXIT for v in Verdict)


@pytest.mark.parametrize("word, command_code, code", [
    (Verdict.HANG, 0, EXIT_HANG), (Verdict.CRASH, 0, EXIT_CRASH),
    (Verdict.HEALTHY, 0, 0), (Verdict.HEALTHY, 9, 9), (Verdict.SUSPECT, 0, 0), (Verdict.ENDED, 1, 1),
    (Verdict.HEALTHY, -9, EXIT_CRASH), (Verdict.HEALTHY, None, EXIT_USAGE),
])
def test_run_fails_on_a_hang_or_crash_and_otherwise_exits_with_its_command(word, command_code, code):
    # GIVEN run's verdict and its command's own exit code WHEN run exits THEN this is its code
    assert verdict.run_exit_code(word, command_code) == code


def _healthy() -> Report:
    return report_without_ranks(Verdict.HEALTHY, ())


def test_a_run_that_outlives_its_timeout_fails_like_a_hang_and_says_why():
    # GIVEN a healthy reading at --timeout WHEN the run's verdict is made final
    report = verdict.run_timed_out(_healthy(), 30)
    # THEN it is a hang, explained by the run-timeout finding first
    assert report.verdict == Verdict.HANG and report.findings[0].rule == "run-timeout"
    assert "30 s" in report.findings[0].title


def test_a_timeout_never_hides_a_crash():
    # GIVEN a crash read at the moment --timeout passed WHEN made final THEN it stays a crash
    crashed = report_without_ranks(Verdict.CRASH, ())
    assert verdict.run_timed_out(crashed, 30) is crashed


def test_an_interrupt_turns_only_a_healthy_reading_into_interrupted():
    # GIVEN readings so far WHEN the watch is stopped by Ctrl-C THEN healthy is no verdict, a hang stays a hang
    assert verdict.interrupted(_healthy()).verdict == Verdict.INTERRUPTED
    hang = report_without_ranks(Verdict.HANG, ())
    assert verdict.interrupted(hang).verdict == Verdict.HANG


def test_a_command_that_failed_before_any_rank_is_a_crash_with_its_last_lines():
    # GIVEN a command that exited 2 before hangdoc saw a rank WHEN judged
    report = verdict.command_ended_unwatched(2, [f"line {i}" for i in range(30)])
    # THEN it is a crash whose evidence is its last ten lines; exit 0 is healthy
    assert report.verdict == Verdict.CRASH and report.findings[0].rule == "command-failed"
    assert report.findings[0].evidence == tuple(f"line {i}" for i in range(20, 30))
    assert verdict.command_ended_unwatched(0, []).verdict == Verdict.HEALTHY


def test_dumps_alone_that_show_a_stuck_collective_are_a_hang():
    # GIVEN a healthy reading whose flight-recorder rule fired WHEN made final from dumps alone
    from hangdoc.model import Finding, Severity

    fired = Finding("flight-recorder", Severity.CRITICAL, (1,), "stuck", (), "fix")
    report = verdict.from_dumps(report_without_ranks(Verdict.HEALTHY, (fired,)))
    # THEN it is a hang and the rule's ranks are the culprits
    assert report.verdict == Verdict.HANG and report.culprit_ranks == (1,)


@pytest.mark.parametrize("word, reason", [
    (Verdict.HANG, StopReason.HANG), (Verdict.CRASH, StopReason.CRASH), (Verdict.HEALTHY, None),
    (Verdict.SUSPECT, None), (Verdict.ENDED, None),
])
def test_only_a_hang_or_a_crash_stops_a_watch_at_once(word, reason):
    assert verdict.stop_reason(report_without_ranks(word, ())) == reason


@pytest.mark.parametrize("case", sorted(p.name for p in GOLDEN.iterdir() if (p / "bundle.json").exists()))
def test_the_json_report_says_all_the_text_says(case):
    # GIVEN a golden bundle WHEN its report is printed as Markdown and as JSON
    report = build_report(load_bundle(GOLDEN / case / "bundle.json"))
    document = json.loads(report_json(report))
    markdown = report_markdown(report)
    # THEN every stack line, cause and missing-stack line the Markdown shows is in the JSON too
    for key in ("stack_tree", "cause", "missing_stacks"):
        assert document[key] == list(getattr(report, key))
    assert [c["ranks"] for c in document["stack_classes"]] == [list(c.ranks) for c in report.stack_classes]
    for line in report.stack_tree:
        assert line.split("] ", 1)[-1][:30] in markdown
    assert document["samples"] == len(load_bundle(GOLDEN / case / "bundle.json").samples)
