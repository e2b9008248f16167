"""The final verdict, one ending at a time: `report/judge.py: judge` is the only way from evidence to
a final Report, and the one map from a verdict (and how the evidence ended) to an exit code
(docs/exit-codes.md)."""
from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections import deque
from pathlib import Path

import pytest

from hangdoc.base.errors import (
    EXIT_CRASH, EXIT_ENDED_UNKNOWN, EXIT_HANG, EXIT_OK, EXIT_SIGINT, EXIT_SLOW, EXIT_SUSPECT, EXIT_USAGE,
)
from hangdoc.bundle.files import load_bundle
from hangdoc.collect.snapshot import Probes
from hangdoc.inputs.evidence import bundle_from_dumps, report_inputs
from hangdoc.live.options import WatchOptions
from hangdoc.live.watcher import Watcher
from hangdoc.model import Ending, StopReason, Verdict
from hangdoc.render.json import report_json
from hangdoc.render.markdown import report_markdown
from hangdoc.analyze import assess
from hangdoc.render.words import headline, verdict_word
from hangdoc.report.judge import End, exit_code, judge
from tests.factories import node_bundle

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
FLIGHT = ROOT / "tests" / "flight_recorder"


def golden(case: str):
    return load_bundle(GOLDEN / case / "bundle.json")


def no_samples():
    return dataclasses.replace(bundle_from_dumps(()), samples=())


@pytest.mark.parametrize("word, code", [
    (Verdict.HANG, EXIT_HANG), (Verdict.CRASH, EXIT_CRASH), (Verdict.ENDED, EXIT_ENDED_UNKNOWN),
    (Verdict.INTERRUPTED, EXIT_SIGINT), (Verdict.SUSPECT, EXIT_SUSPECT), (Verdict.HEALTHY, EXIT_OK),
    (Verdict.SLOW, EXIT_SLOW),
])
def test_every_verdict_has_its_exit_code(word, code):
    # GIVEN a verdict WHEN watch or report exits on it THEN its code is the documented one
    assert exit_code(word) == code
    assert exit_code(word.value) == code


@pytest.mark.parametrize("word, command_code, code", [
    (Verdict.HANG, 0, EXIT_HANG), (Verdict.CRASH, 0, EXIT_CRASH),
    (Verdict.HEALTHY, 0, 0), (Verdict.HEALTHY, 9, 9), (Verdict.SUSPECT, 0, 0), (Verdict.ENDED, 1, 1),
    (Verdict.HEALTHY, -9, EXIT_CRASH), (Verdict.HEALTHY, None, EXIT_USAGE), (Verdict.SLOW, 0, 0),
])
def test_run_fails_on_a_hang_or_crash_and_otherwise_exits_with_its_command(word, command_code, code):
    # GIVEN run's verdict and its command's own exit code WHEN run exits THEN this is its code
    assert exit_code(word, End(Ending.ENDED, returncode=command_code, run=True)) == code


def test_run_fails_a_slow_run_only_when_asked():
    ended = End(Ending.ENDED, returncode=0, run=True, fail_on_slow=True)
    assert exit_code(Verdict.SLOW, ended, slow=True) == EXIT_SLOW
    assert exit_code(Verdict.HEALTHY, ended, slow=False) == 0


def test_a_run_that_outlives_its_timeout_fails_like_a_hang_and_says_why():
    # GIVEN a healthy job's evidence at run's --timeout
    bundle = golden("healthy-finished")
    assert judge(bundle).report.verdict == Verdict.HEALTHY
    # WHEN it is judged
    judgement = judge(bundle, End(Ending.TIMED_OUT, timeout_s=30, run=True))
    # THEN it is a hang, explained by the run-timeout finding first, and run exits 3
    assert judgement.report.verdict == Verdict.HANG and judgement.report.findings[0].rule == "run-timeout"
    assert "30 s" in judgement.report.findings[0].title
    assert judgement.exit_code == EXIT_HANG


@pytest.mark.parametrize("case, moved", [("healthy-finished", "the job still moved when time ran out: "),
                                          ("compute-2x", "the job still moved when time ran out, slowly")])
def test_a_run_that_outlives_its_timeout_while_moving_is_not_called_hung_in_words(case, moved):
    # GIVEN a job read healthy, or slow with a straggler, when run's --timeout passes
    before = judge(golden(case)).report
    # WHEN it is judged
    judgement = judge(golden(case), End(Ending.TIMED_OUT, timeout_s=150, run=True))
    # THEN it fails as a hang does (verdict hang, exit 3), but the words say a budget ran out and what
    # was read by then, never a stall: the straggler and its share where it was slow
    report, line = judgement.report, headline(judgement.report)
    assert report.verdict == Verdict.HANG and judgement.exit_code == EXIT_HANG
    assert line.startswith("TIMEOUT: the run did not finish within --timeout 150 s; "), line
    assert verdict_word(report) == "TIMEOUT" and verdict_word(before) == str(before.verdict).upper()
    assert report.findings[0].evidence[0].startswith(moved), report.findings[0].evidence
    if before.slow is not None:
        assert f"it still moved, slowly: rank {before.slow.stragglers[0]} is the straggler" in line, line
    else:
        assert "no rank was blocked long enough for a hang verdict" in line, line


def test_watch_timeout_keeps_the_verdict():
    # GIVEN the same evidence at watch's --timeout WHEN judged THEN healthy, exit 0
    judgement = judge(golden("healthy-finished"), End(Ending.TIMED_OUT, timeout_s=30))
    assert judgement.report.verdict == Verdict.HEALTHY and judgement.exit_code == EXIT_OK


def test_a_timeout_never_hides_a_crash():
    # GIVEN a crash read at the moment run's --timeout passed WHEN judged THEN it stays a crash
    judgement = judge(golden("rank-sigkill"), End(Ending.TIMED_OUT, timeout_s=30, run=True))
    assert judgement.report.verdict == Verdict.CRASH
    assert all(f.rule != "run-timeout" for f in judgement.report.findings)


@pytest.mark.parametrize("code", [130, 143])
def test_an_interrupt_turns_only_a_healthy_reading_into_interrupted(code):
    # GIVEN readings so far WHEN the watch is stopped by Ctrl-C or SIGTERM
    healthy = judge(golden("healthy-finished"), End(Ending.INTERRUPTED, signal_exit=code))
    hang = judge(golden("bz2-shards"), End(Ending.INTERRUPTED, signal_exit=code))
    # THEN healthy is no verdict, a hang stays a hang, and both leave with the signal's code
    assert healthy.report.verdict == Verdict.INTERRUPTED and hang.report.verdict == Verdict.HANG
    assert healthy.exit_code == hang.exit_code == code


def test_an_interrupt_before_any_sample_is_interrupted():
    judgement = judge(no_samples(), End(Ending.INTERRUPTED, signal_exit=143))
    assert judgement.report.verdict == Verdict.INTERRUPTED and judgement.exit_code == 143
    assert judgement.diagnosis is None


def test_a_command_that_failed_before_any_rank_is_a_crash_with_its_last_lines():
    # GIVEN a command that exited 2 before hangdoc saw a rank WHEN judged
    lines = tuple(f"line {i}" for i in range(30))
    judgement = judge(no_samples(), End(Ending.COMMAND_EXITED, returncode=2, output_tail=lines, run=True))
    # THEN it is a crash whose evidence is its last ten lines, exit 4; exit 0 is healthy
    report = judgement.report
    assert report.verdict == Verdict.CRASH and report.findings[0].rule == "command-failed"
    assert report.findings[0].evidence == lines[20:] and judgement.exit_code == EXIT_CRASH
    ok = judge(no_samples(), End(Ending.COMMAND_EXITED, returncode=0, run=True))
    assert ok.report.verdict == Verdict.HEALTHY and ok.exit_code == 0


def test_a_run_out_of_time_before_any_rank_is_a_hang():
    judgement = judge(no_samples(), End(Ending.TIMED_OUT, timeout_s=5, run=True))
    assert judgement.report.verdict == Verdict.HANG and judgement.exit_code == EXIT_HANG
    assert judgement.report.findings[0].rule == "run-timeout"


def test_dumps_alone_that_show_a_stuck_collective_are_a_hang():
    # GIVEN the Flight Recorder dumps of a job whose rank 1 never joined a collective
    # WHEN they are judged alone
    _, judgement = report_inputs([FLIGHT / "gloo-straggler"])
    # THEN it is a hang whose culprit is the flight-recorder rule's rank
    fired = [f for f in judgement.report.findings if f.rule == "flight-recorder"]
    assert fired and judgement.report.verdict == Verdict.HANG
    assert judgement.report.culprit_ranks == tuple(sorted({r for f in fired for r in f.ranks}))
    assert judgement.exit_code == EXIT_HANG


@pytest.mark.parametrize("word, reason", [
    ("bz2-shards", StopReason.HANG), ("rank-sigkill", StopReason.CRASH), ("healthy-finished", None),
])
def test_only_a_hang_or_a_crash_stops_a_watch_at_once(word, reason):
    assert judge(golden(word)).stop == reason


def test_the_same_evidence_is_never_analysed_twice(monkeypatch):
    # GIVEN a judgement of a bundle, and a count of the analyses made
    calls = []
    real = assess.diagnose
    monkeypatch.setattr(assess, "diagnose", lambda *a, **k: calls.append(1) or real(*a, **k))
    bundle = golden("bz2-shards")
    first = judge(bundle, lanes=False)
    # WHEN the same evidence is judged again with it as the prior, ending otherwise
    second = judge(bundle, End(Ending.INTERRUPTED, signal_exit=130), first)
    # THEN the analysis ran once, and the second carries the lanes the first left out
    assert len(calls) == 1 and second.diagnosis is first.diagnosis
    assert second.report.lanes and not first.report.lanes
    # AND new evidence is analysed anew
    judge(dataclasses.replace(bundle, samples=bundle.samples[:-1]), prior=first)
    assert len(calls) == 2


def test_a_watch_round_analyses_once(monkeypatch):
    # GIVEN a watcher over three rounds of a job whose rank 0 waits on data, its probes stubbed
    t0 = 1_700_000_000.0
    rounds = [node_bundle(0, 1, 0, t0, samples=n, workers=1, ranks_per_node=2) for n in (2, 3, 4)]
    options = WatchOptions(interval_s=1.0, timeout_s=1e6, hang_after_s=1e6)
    watcher = Watcher(rounds[0].job.launcher_pid, Probes(), options, job=rounds[0].job,
                      samples=deque(rounds[0].samples))
    served = iter(rounds)
    current = [next(served)]

    class Done(Exception):
        pass

    def step():
        try:
            current[0] = next(served)
        except StopIteration:
            raise Done from None
        return current[0]

    watcher.bundle = lambda: current[0]
    watcher.step = step
    watcher._wait = lambda delay: None
    watcher._with_flight_records = lambda bundle, stuck: bundle
    calls = []
    real = assess.diagnose
    monkeypatch.setattr(assess, "diagnose", lambda *a, **k: calls.append(1) or real(*a, **k))
    # WHEN it runs its three rounds
    with pytest.raises(Done):
        watcher.run()
    # THEN the analysis ran once a round
    assert len(calls) == 3


def test_interrupted_watch_takes_over_the_last_round(monkeypatch):
    # GIVEN a watcher whose last round was judged
    bundle = node_bundle(0, 1, 0, 1_700_000_000.0, samples=3, workers=1, ranks_per_node=2)
    watcher = Watcher(bundle.job.launcher_pid, Probes(), WatchOptions(), job=bundle.job, samples=deque(bundle.samples))
    watcher.bundle = lambda: bundle
    watcher._with_flight_records = lambda b, stuck: b
    watcher.judge_round(bundle)
    calls = []
    monkeypatch.setattr(assess, "diagnose", lambda *a, **k: calls.append(1))
    # WHEN it is stopped by SIGTERM
    outcome = watcher.stopped(143)
    # THEN the report so far comes without a second analysis, and exits 143
    assert not calls and outcome.exit_code == 143 and outcome.reason is StopReason.INTERRUPTED


@pytest.mark.parametrize("case", sorted(p.name for p in GOLDEN.iterdir() if (p / "bundle.json").exists()))
def test_the_json_report_says_all_the_text_says(case):
    # GIVEN a golden bundle WHEN its report is printed as Markdown and as JSON
    report = judge(golden(case)).report
    document = json.loads(report_json(report))
    markdown = report_markdown(report)
    # THEN every stack line, cause and missing-stack line the Markdown shows is in the JSON too
    for key in ("stack_tree", "cause", "missing_stacks"):
        assert document[key] == list(getattr(report, key))
    assert [c["ranks"] for c in document["stack_classes"]] == [list(c.ranks) for c in report.stack_classes]
    for line in report.stack_tree:
        assert line.split("] ", 1)[-1][:30] in markdown
    assert document["samples"] == len(golden(case).samples)


# --- the one judge holds: nothing outside report/ builds a Report or reads a verdict as a string -----

PRODUCT = ROOT / "hangdoc"
VERDICT_WORDS = "|".join(v.value for v in Verdict)


def _sources(skip: tuple[str, ...] = ()) -> list[Path]:
    return [p for p in PRODUCT.rglob("*.py") if not any(part in skip for part in p.relative_to(PRODUCT).parts)]


def test_no_verdict_is_compared_as_a_string():
    # GIVEN the product's sources WHEN searched for a verdict compared with a string literal
    pattern = re.compile(rf"verdict\w*\s*(==|!=|\bin\b|\bis\b)\s*\(?\s*['\"]({VERDICT_WORDS})['\"]")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _sources() for n, line in enumerate(p.read_text().splitlines(), 1)
             if pattern.search(line)]
    # THEN there is none: verdicts are enums
    assert not found


def test_no_report_is_built_outside_report():
    # GIVEN the product's sources outside report/ (and model/, where Report is declared)
    built = []
    for path in _sources(skip=("report", "model")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
                    "Report", "analyse", "report_of", "report_without_ranks"):
                built.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    # THEN none builds a Report or starts the analysis but through judge
    assert not built


def test_judgement_is_a_frozen_record():
    judgement = judge(golden("healthy-finished"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        judgement.exit_code = 3  # type: ignore[misc]


def test_a_rank_that_falls_between_two_reads_has_its_last_lines_in_any_bundle_that_holds_its_exit():
    # GIVEN a watcher of a job whose rank 1 prints its traceback and exits the moment after the
    # watch has read the job's output (the exits are told by a thread, at any time)
    from hangdoc.model import LogTail, ProcessExit

    bundle = node_bundle(0, 1, 0, 1_700_000_000.0, samples=2, workers=1, ranks_per_node=2)
    rank = next(p for p in bundle.job.ranks if p.rank == 1)
    printed: list[str] = ["step 7"]
    exits: list = []

    class Exits:
        @property
        def exits(self):
            return tuple(exits)

    def output():
        lines = LogTail("job.log", tuple(printed))
        if not exits:     # it falls right after this read
            printed.append("RuntimeError: unable to allocate shared memory(shm)")
            exits.append(ProcessExit(rank.pid, 1_700_000_010.0, code=1, source="zombie"))
        return (lines,)

    watcher = Watcher(bundle.job.launcher_pid, Probes(), WatchOptions(), job=bundle.job,
                      samples=deque(bundle.samples), extra_logs=output, exit_watcher=Exits())
    # WHEN the watch builds its bundle round after round
    built = [watcher.bundle() for _ in range(2)]
    # THEN a bundle that holds the rank's exit holds the line it printed before it
    for made in built:
        if any(e.pid == rank.pid for e in made.exits):
            assert any("unable to allocate" in line for tail in made.logs for line in tail.lines), made.logs
    assert any(made.exits for made in built)
