"""Where a verdict becomes final, and the one map from a verdict to an exit code.

The analysis proposes a verdict from the samples (`hangdoc/analyze/diagnose.py: decide`); what
happened around the samples enters here as inputs: a bundle made of Flight Recorder dumps alone,
a `run` that outlived its --timeout, a watch stopped by Ctrl-C or SIGTERM.
"""
from __future__ import annotations

import dataclasses

from hangdoc.base.errors import (
    EXIT_CRASH, EXIT_ENDED_UNKNOWN, EXIT_HANG, EXIT_OK, EXIT_SIGINT, EXIT_SLOW, EXIT_SUSPECT, EXIT_USAGE,
)
from hangdoc.model import Finding, Report, Severity, StopReason, Verdict
from hangdoc.model.rule import Rule, finding
from hangdoc.report.build import report_without_ranks

COMMAND_FAILED = Rule(
    slug="command-failed",
    title="The command failed before any rank could be watched",
    severity=Severity.CRITICAL,
    summary="Raised by `hangdoc run` when the command it starts exits non-zero before hangdoc could "
            "find a rank to watch (a typo, an import error, a bad argument): its last output lines are the evidence.",
    fix="Read the command's output above; it failed at start-up.",
    commands=("run",),
)
RUN_TIMEOUT = Rule(
    slug="run-timeout",
    title="The run overstayed its --timeout",
    severity=Severity.CRITICAL,
    summary="Raised by `hangdoc run` when the smoke run is still going at --timeout without a hang "
            "verdict: CI must not wait forever, so it fails like a hang.",
    fix="Lower --max-steps for the smoke run, or raise --timeout if the run is simply long.",
    commands=("run",),
)
# The slugs raised here rather than by a live rule (the registry, hangdoc/registry.py, lists them).
RECORDS = (COMMAND_FAILED, RUN_TIMEOUT)

_EXIT = {Verdict.HANG: EXIT_HANG, Verdict.CRASH: EXIT_CRASH, Verdict.ENDED: EXIT_ENDED_UNKNOWN,
         Verdict.INTERRUPTED: EXIT_SIGINT, Verdict.SUSPECT: EXIT_SUSPECT, Verdict.HEALTHY: EXIT_OK,
         Verdict.SLOW: EXIT_SLOW}


def from_dumps(report: Report) -> Report:
    """Dumps alone decide: a stuck collective (the flight-recorder rule fired) is a hang, its ranks the culprits."""
    fired = [f for f in report.findings if f.rule == "flight-recorder"]
    if not fired or report.verdict != Verdict.HEALTHY:
        return report
    culprits = tuple(sorted({r for f in fired for r in f.ranks}))
    return dataclasses.replace(report, verdict=Verdict.HANG, culprit_ranks=culprits)


def timeout_finding(timeout_s: float | None) -> Finding:
    return finding(RUN_TIMEOUT, (), f"The run did not finish within --timeout {timeout_s:g} s",
                               ["no rank was blocked long enough for a hang verdict, but the run overstayed its budget"])


def run_timed_out(report: Report, timeout_s: float | None) -> Report:
    """A smoke run that outlives its budget fails like a hang: CI must not wait forever."""
    if report.verdict in (Verdict.HEALTHY, Verdict.SUSPECT, Verdict.SLOW):
        return dataclasses.replace(report, verdict=Verdict.HANG,
                                   findings=(timeout_finding(timeout_s),) + report.findings)
    return report


def run_out_of_time_unwatched(timeout_s: float | None) -> Report:
    """--timeout passed before any rank could be watched."""
    return report_without_ranks(Verdict.HANG, (timeout_finding(timeout_s),))


def command_ended_unwatched(returncode: int, last_lines: list[str]) -> Report:
    """The command ended before any rank could be watched: its own exit code is the verdict."""
    if returncode == 0:
        return report_without_ranks(Verdict.HEALTHY, ())
    return report_without_ranks(Verdict.CRASH, (finding(
        COMMAND_FAILED, (), f"The command exited with code {returncode} before any rank could be watched", last_lines[-10:]),))


def interrupted(report: Report) -> Report:
    """Stopped before a verdict (Ctrl-C, SIGTERM): a healthy reading so far is no verdict."""
    if report.verdict == Verdict.HEALTHY:
        return dataclasses.replace(report, verdict=Verdict.INTERRUPTED)
    return report


def exit_code(verdict: Verdict | str) -> int:
    """The exit code of `watch` and `report` (docs/exit-codes.md)."""
    return _EXIT.get(Verdict(verdict), EXIT_OK)


def run_exit_code(verdict: Verdict | str, command_code: int | None, slow: bool = False) -> int:
    """`run` fails on a hang or a crash; otherwise it exits with its command's own code (a command
    killed by a signal: as a crash), or EXIT_SLOW for a slow run that `--fail-on slow` fails."""
    if verdict in (Verdict.HANG, Verdict.CRASH):
        return exit_code(verdict)
    if command_code is None:
        return EXIT_USAGE
    if command_code < 0:
        return EXIT_CRASH
    return EXIT_SLOW if slow and command_code == 0 else command_code


def stop_reason(report: Report) -> StopReason | None:
    """The verdicts that end a watch at once."""
    if report.verdict == Verdict.HANG:
        return StopReason.HANG
    if report.verdict == Verdict.CRASH:
        return StopReason.CRASH
    return None
