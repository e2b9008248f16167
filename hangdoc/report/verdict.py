"""The slugs the final verdict raises itself rather than a live rule (`report/judge.py`): a
command that failed before any rank could be watched, a run that overstayed its --timeout, a
process of the job that outlived its command."""
from __future__ import annotations

from hangdoc.model import Severity
from hangdoc.model.rule import Rule

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
OUTLIVED_JOB = Rule(
    slug="outlived-job",
    title="A process of the job outlived its command",
    severity=Severity.WARNING,
    summary="Raised by `hangdoc run` when its command has ended but a process it started still ran "
            "(a daemon started with `setsid` or `nohup`, double-forked or not, a server left behind): on a CI "
            "runner it would hold ports, GPUs and files after the step; `run` ends it and says whether it could.",
    fix="End what the job starts before it exits (a trap in the script, `kill` of the saved pid, a "
        "`finally:` that stops the server), or start it where its end is managed.",
    commands=("run",),
)
# The slugs raised here rather than by a live rule (the registry, hangdoc/registry.py, lists them).
RECORDS = (COMMAND_FAILED, RUN_TIMEOUT, OUTLIVED_JOB)
