"""The one way from evidence to a final Report: `judge(bundle, ending, prior)`.

The analysis proposes a verdict from the samples (`analyze/diagnose.py: decide`); how the evidence
came to an end enters here as an input (an `End`): a watch round of a job that goes on, a job that
ended, a `run` that outlived its --timeout, a watch stopped by Ctrl-C or SIGTERM, a command that
ended before any rank was watched, Flight Recorder dumps alone. Each ending that changes the
proposed verdict is a private branch below, and the exit code is read here, once, for every
command (`watch`, `report`, `run`). `prior`, the last round's judgement, carries its work: the
same evidence is never analysed twice.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hangdoc.analyze.assess import Analysis, Diagnosis, LiveTimelines, Timeline, analyse
from hangdoc.base.errors import (
    EXIT_CRASH, EXIT_ENDED_UNKNOWN, EXIT_HANG, EXIT_OK, EXIT_SIGINT, EXIT_SLOW, EXIT_SUSPECT, EXIT_USAGE,
)
from hangdoc.model import Bundle, Ending, NodeDigest, Report, StopReason, Verdict
from hangdoc.model.rule import finding
from hangdoc.report.build import report_of, report_without_ranks
from hangdoc.report.verdict import COMMAND_FAILED, OUTLIVED_JOB, RUN_TIMEOUT

_EXIT = {Verdict.HANG: EXIT_HANG, Verdict.CRASH: EXIT_CRASH, Verdict.ENDED: EXIT_ENDED_UNKNOWN,
         Verdict.INTERRUPTED: EXIT_SIGINT, Verdict.SUSPECT: EXIT_SUSPECT, Verdict.HEALTHY: EXIT_OK,
         Verdict.SLOW: EXIT_SLOW}
_STOPS = {Verdict.HANG: StopReason.HANG, Verdict.CRASH: StopReason.CRASH}
# A slow verdict is settled, and ends a watch (`watch` only: `run` lets its command finish), once it
# has held the same way (the same stragglers, or data-bound) for this many rounds in a row,
# spanning at least the job's hang threshold and never less than SLOW_SETTLED_S.
SLOW_SETTLED_ROUNDS = 5
SLOW_SETTLED_S = 30.0


@dataclass(frozen=True)
class End:
    """How the evidence came to an end, and what the command that asks knows of it.

    `run`: the verdict is `run`'s (a hang or a crash fails; otherwise the command's own exit code,
    or EXIT_SLOW for a slow run with `fail_on_slow`), not `watch`'s."""

    kind: Ending = Ending.RUNNING
    timeout_s: float | None = None         # the --timeout that passed (TIMED_OUT)
    returncode: int | None = None          # the command's own exit code, once it ended (run)
    output_tail: tuple[str, ...] = ()      # its last output lines (COMMAND_EXITED)
    signal_exit: int = EXIT_SIGINT         # 130 (Ctrl-C) or 143 (SIGTERM): INTERRUPTED
    outlived: tuple[str, ...] = ()         # the job's processes still running once its command ended (run)
    cannot_start: str | None = None        # why the command could not start at all (COMMAND_EXITED)
    run: bool = False
    fail_on_slow: bool = False


RUNNING = End()


@dataclass(frozen=True)
class Judgement:
    """The final report, the diagnosis it came from (None: no rank was watched) and the exit code."""

    report: Report
    diagnosis: Diagnosis | None
    exit_code: int
    # The work a later judgement of the same evidence takes over (`prior`): what was judged, the
    # report before the ending's branch, and the analysis it came from.
    evidence: Bundle | None = dataclasses.field(default=None, repr=False, compare=False)
    proposed: Report | None = dataclasses.field(default=None, repr=False, compare=False)
    analysis: Analysis | None = dataclasses.field(default=None, repr=False, compare=False)
    # The run of rounds judged slow the same way, up to this one: (first round's time, this
    # round's time, rounds); None when this round is not slow.
    slow_streak: tuple[float, float, int] | None = None

    @property
    def lines(self) -> dict[int, Timeline] | None:
        """The timelines the analysis read."""
        return self.analysis.lines if self.analysis is not None else None

    @property
    def digest(self) -> NodeDigest | None:
        """The node's reading of its ranks, which a save writes beside the samples."""
        return self.diagnosis.digest if self.diagnosis is not None else None

    @property
    def failed(self) -> bool:
        """The job failed (a hang or a crash): what fails `run`, its JUnit case and a report's headline."""
        return self.report.failed

    @property
    def stop(self) -> StopReason | None:
        """The verdicts that end a watch at once."""
        return _STOPS.get(self.report.verdict)

    @property
    def settled_slow(self) -> bool:
        """Slow the same way for SLOW_SETTLED_ROUNDS rounds spanning the hang threshold (at least
        SLOW_SETTLED_S): what ends a `watch` of a slow job, as a hang ends it at once. Not while the
        data a long batch waits on ends its passes at one place, not yet often enough to tell a
        rewind for ever (DataPace.converging): the next passes tell slow from hung."""
        if self.slow_streak is None:
            return False
        pace = self.report.slow.pace if self.report.slow is not None else None
        if pace is not None and pace.converging:
            return False
        since, until, rounds = self.slow_streak
        threshold = self.report.threshold.hang_after_s if self.report.threshold is not None else 0.0
        return rounds >= SLOW_SETTLED_ROUNDS and until - since >= max(SLOW_SETTLED_S, threshold)


def judge(bundle: Bundle, ending: End = RUNNING, prior: Judgement | None = None, *,
          hang_after: float | None = None, live: LiveTimelines | None = None,
          diagnosis: Diagnosis | None = None, lanes: bool = True) -> Judgement:
    """The verdict on `bundle` given how it ended.

    `prior`: the last judgement; when it judged the same evidence, its analysis is taken over.
    `live`: a watch's timelines, kept from round to round. `diagnosis`: one made already (a job of
    thousands of nodes, diagnosed by class from their digests). `lanes=False`: no timeline lanes
    (a watch's round: they are drawn for the report it ends with)."""
    kind = ending.kind
    if not bundle.samples and kind in (Ending.COMMAND_EXITED, Ending.TIMED_OUT, Ending.INTERRUPTED, Ending.ENDED):
        unwatched = _unwatched(ending)
        return dataclasses.replace(unwatched, report=with_outlived(unwatched.report, ending.outlived))
    proposed, analysis = _analysis(bundle, prior, hang_after, live, diagnosis, lanes)
    report = proposed
    if kind is Ending.DUMPS_ONLY:
        report = _from_dumps(report)
    elif kind is Ending.TIMED_OUT and ending.run:
        report = _run_timed_out(report, ending.timeout_s)
    elif kind is Ending.INTERRUPTED:
        report = _interrupted(report)
    report = with_outlived(report, ending.outlived)
    return Judgement(report, analysis.diagnosis, _exit_code(report, ending), bundle, proposed, analysis,
                     slow_streak=_slow_streak(report, bundle.last.time, prior))


def _slow_streak(report: Report, at: float, prior: Judgement | None) -> tuple[float, float, int] | None:
    """The slow run this round extends: the prior round's, when it was slow the same way (the
    same kind, the same stragglers) and earlier; else one that starts now."""
    if report.verdict != Verdict.SLOW or report.slow is None:
        return None
    before = prior.report.slow if prior is not None and prior.slow_streak is not None else None
    if before is not None and (before.kind, before.stragglers) == (report.slow.kind, report.slow.stragglers) \
            and prior.slow_streak[1] < at:
        since, _, rounds = prior.slow_streak
        return since, at, rounds + 1
    if before is not None and prior.slow_streak[1] >= at:
        return prior.slow_streak      # the same evidence judged again (a final judgement)
    return at, at, 1


def unjudged(why_stopped: Verdict = Verdict.INTERRUPTED) -> Report:
    """The report of a watch that never saw a rank (a scenario that failed to start)."""
    return report_without_ranks(why_stopped, ())


# --- the analysis, done once for the same evidence ---------------------------------------------


def _analysis(bundle: Bundle, prior: Judgement | None, hang_after: float | None, live: LiveTimelines | None,
              diagnosis: Diagnosis | None, lanes: bool) -> tuple[Report, Analysis]:
    if prior is not None and prior.analysis is not None and prior.proposed is not None and \
            _same_evidence(prior.evidence, bundle):
        report, analysis = prior.proposed, prior.analysis
        if lanes and not report.lanes:
            analysis = analysis.with_lanes()
            report = dataclasses.replace(report, lanes=analysis.lanes)
        return report, analysis
    analysis = analyse(bundle, hang_after, live=live, diagnosis=diagnosis, with_lanes=lanes)
    return report_of(analysis), analysis


def _same_evidence(before: Bundle | None, now: Bundle) -> bool:
    """The same samples (by identity: a watch's samples are never rebuilt) and the same records beside them."""
    if before is None:
        return False
    if before is now:
        return True
    a, b = before.samples, now.samples
    return (len(a) == len(b) and bool(a) and a[0] is b[0] and a[-1] is b[-1]
            and before.exit_code == now.exit_code and before.exits == now.exits and before.logs == now.logs
            and before.flight_records == now.flight_records and before.ras == now.ras
            and before.options == now.options)


# --- the endings' branches --------------------------------------------------------------------


def _unwatched(ending: End) -> Judgement:
    """A verdict reached before any rank was seen."""
    if ending.kind is Ending.TIMED_OUT:
        report = report_without_ranks(Verdict.HANG, (_timeout_finding(ending.timeout_s, _NOTHING_WATCHED),))
    elif ending.kind is Ending.INTERRUPTED:
        report = report_without_ranks(Verdict.INTERRUPTED, ())
    elif ending.cannot_start is not None:     # a usage error (exit 2), with the outputs that say so
        report = report_without_ranks(Verdict.CRASH, (finding(
            COMMAND_FAILED, (), f"The command could not start: {ending.cannot_start}", [ending.cannot_start]),))
        return Judgement(report, None, EXIT_USAGE)
    elif ending.returncode == 0:
        report = report_without_ranks(Verdict.HEALTHY, ())
    else:   # the command ended before any rank could be watched: its own exit code is the verdict
        report = report_without_ranks(Verdict.CRASH, (finding(
            COMMAND_FAILED, (), f"The command exited with code {ending.returncode} before any rank could be watched",
            list(ending.output_tail[-10:])),))
    return Judgement(report, None, _exit_code(report, ending))


def with_outlived(report: Report, processes: tuple[str, ...]) -> Report:
    """A warning, not a verdict: the command ended and its code stands, but it left processes running."""
    if not processes:
        return report
    many = f"{len(processes)} processes" if len(processes) > 1 else "A process"
    return dataclasses.replace(report, findings=report.findings + (finding(
        OUTLIVED_JOB, (), f"{many} of the job still ran after its command ended", processes, max_evidence=10),))


def _from_dumps(report: Report) -> Report:
    """Dumps alone decide: a stuck collective (the flight-recorder rule fired) is a hang, its ranks the culprits."""
    fired = [f for f in report.findings if f.rule == "flight-recorder"]
    if not fired or report.verdict != Verdict.HEALTHY:
        return report
    culprits = tuple(sorted({r for f in fired for r in f.ranks}))
    return dataclasses.replace(report, verdict=Verdict.HANG, culprit_ranks=culprits)


def _timeout_finding(timeout_s: float | None, read: str):
    return finding(RUN_TIMEOUT, (), f"The run did not finish within --timeout {timeout_s:g} s", [read])


# What the watch had read when run's budget ran out, by the verdict it would have given: no stall
# was seen, and the report must not claim one (the exit code is a hang's: CI must fail).
_READ_AT_TIMEOUT = {
    Verdict.HEALTHY: "the job still moved when time ran out: no rank was blocked long enough for a hang "
                     "verdict; the run is longer than its budget",
    Verdict.SLOW: "the job still moved when time ran out, slowly (the slow reading below): no rank was blocked "
                  "long enough for a hang verdict",
    Verdict.SUSPECT: "the ranks were split in a collective when time ran out, not yet quiet long enough to tell a "
                     "hang from a slow step",
}
_NOTHING_WATCHED = "no rank was watched before time ran out (the command had not started its ranks)"


def _run_timed_out(report: Report, timeout_s: float | None) -> Report:
    """A smoke run that outlives its budget fails like a hang (CI must not wait forever), and says
    what was read when time ran out."""
    if report.verdict in _READ_AT_TIMEOUT:
        return dataclasses.replace(report, verdict=Verdict.HANG, findings=(
            _timeout_finding(timeout_s, _READ_AT_TIMEOUT[report.verdict]),) + report.findings)
    return report


def _interrupted(report: Report) -> Report:
    """Stopped before a verdict (Ctrl-C, SIGTERM): a healthy reading so far is no verdict."""
    if report.verdict == Verdict.HEALTHY:
        return dataclasses.replace(report, verdict=Verdict.INTERRUPTED)
    return report


def _exit_code(report: Report, ending: End) -> int:
    return exit_code(report.verdict, ending, slow=report.slow is not None)


def exit_code(verdict: Verdict | str, ending: End = RUNNING, slow: bool = False) -> int:
    """docs/exit-codes.md: `watch` and `report` by the verdict; `run` fails on a hang or a crash and
    otherwise exits with its command's own code (killed by a signal: as a crash), or EXIT_SLOW for a
    slow run (`slow`: the report says why it is) that `--fail-on slow` fails; a stop by a signal
    leaves with its own code."""
    verdict = Verdict(verdict)
    if ending.kind == Ending.INTERRUPTED:
        return ending.signal_exit
    if not ending.run or verdict.failed:
        return _EXIT[verdict]
    code = ending.returncode
    if code is None:
        return EXIT_USAGE
    if code < 0:
        return EXIT_CRASH
    return EXIT_SLOW if ending.fail_on_slow and slow and code == 0 else code
