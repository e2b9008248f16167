"""`hangdoc run -- CMD`: start a training command, watch it, and end it on a hang.

The command runs in a session of its own so that on a hang hangdoc can end exactly
the job it started (the launcher's group, and every rank's own session), nothing else.
Its output streams through and a bounded, redacted tail is kept for the log rules.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, TextIO

from hangdoc.report import build_report, report_without_ranks
from hangdoc.collect.discover import find_job
from hangdoc.base.errors import HangdocError, NotDistributed
from hangdoc.collect.procfs import ProcFS
from hangdoc.model import Bundle, Finding, Job, LogTail, Options, Severity, Verdict
from hangdoc.live.pipeline import make_bundle
from hangdoc.base.redact import LineRedactor
from hangdoc.rules.base import Rule, finding
from hangdoc.live.proc import RunningJob, stop_job
from hangdoc.live.watcher import Outcome, WatchConfig, Watcher

TAIL_LINES = 2000
# A command with no ranks after this long is watched as a single process: soon for a plain
# script, later for a launcher (torchrun, deepspeed...) whose ranks take a while to appear.
SINGLE_AFTER_S = 2.0
LAUNCHER_SINGLE_AFTER_S = 30.0


class OutputTail:
    """Copies the job's output to `sink` line by line and keeps the last lines, redacted."""

    def __init__(self, stream, sink: TextIO, max_lines: int = TAIL_LINES):
        self.lines: deque[str] = deque(maxlen=max_lines)
        self._redact = LineRedactor()
        self._thread = threading.Thread(target=self._pump, args=(stream, sink), daemon=True)
        self._thread.start()

    def _pump(self, stream, sink: TextIO) -> None:
        for raw in iter(stream.readline, b""):
            text = raw.decode("utf-8", "replace")
            try:
                sink.write(text)
                sink.flush()
            except (OSError, ValueError):
                pass
            self.lines.append(self._redact(text.rstrip("\n")))

    def logs(self) -> tuple[LogTail, ...]:
        return (LogTail(source="<output of the command>", lines=tuple(self.lines)),) if self.lines else ()

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)


@dataclass
class RunResult:
    outcome: Outcome
    job_exit_code: int | None


def run_command(cmd: list[str], config: WatchConfig, probes, sink: TextIO,
                on_sample: Callable | None = None, sleep: Callable[[float], None] = time.sleep) -> RunResult:
    """Run `cmd` under watch until it ends, crashes, hangs or `config.timeout_s` passes."""
    try:
        popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True,
                                 env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except OSError as exc:
        raise HangdocError(f"cannot start {cmd[0]!r}: {exc.strerror}") from None
    job = RunningJob(popen)
    tail = OutputTail(popen.stdout, sink)
    began = time.monotonic()
    watcher = None
    try:
        watcher = _attach(popen, job, config, probes, tail, began, sleep)
        if watcher is None:
            outcome = _ended_before_attach(popen, tail, config)
        else:
            remaining = None if config.timeout_s is None else max(0.0, config.timeout_s - (time.monotonic() - began))
            watcher.config = dataclasses.replace(config, timeout_s=remaining)
            outcome = watcher.run(on_sample, ended=lambda: popen.poll() is not None,
                                  on_round=job.refresh_tree)
            if outcome.reason == "ended":
                popen.wait()
                tail.join()
                bundle = watcher.bundle()
                outcome = Outcome(build_report(bundle, config.hang_after_s), bundle, "ended")
            elif outcome.reason == "timeout":
                outcome = _timed_out(outcome, config)
    finally:
        if popen.poll() is None:
            stop_job(job)
        tail.join()
    return RunResult(outcome, popen.returncode)


def _attach(popen, job: RunningJob, config: WatchConfig, probes, tail: OutputTail, began: float,
            sleep) -> Watcher | None:
    """Wait until the command's ranks exist (or it ends, or it is a lone Python process)."""
    from hangdoc.collect.discover import looks_like_launcher

    patience = LAUNCHER_SINGLE_AFTER_S if looks_like_launcher(probes.procfs, popen.pid) else SINGLE_AFTER_S
    while popen.poll() is None:
        job.refresh_tree()
        single = time.monotonic() - began >= patience
        try:
            find_job(popen.pid, probes.procfs, single=single)
        except NotDistributed:
            pass
        except HangdocError:
            if single:
                # The command is a wrapper (a shell): watch the first Python process below it.
                child = _python_descendant(job, probes)
                if child is not None:
                    return _start(child, probes, config, popen, tail, single=True)
        else:
            return _start(popen.pid, probes, config, popen, tail, single=single)
        if config.timeout_s is not None and time.monotonic() - began >= config.timeout_s:
            return None
        sleep(0.2)
    return None


def _python_descendant(job: RunningJob, probes) -> int | None:
    from hangdoc.collect.discover import is_python

    for pid in sorted(job.refresh_tree()):
        try:
            if is_python(probes.procfs.cmdline(pid), probes.procfs.exe(pid)):
                return pid
        except Exception:
            continue
    return None


def _start(pid: int, probes, config: WatchConfig, popen, tail: OutputTail, single: bool) -> Watcher:
    watcher = Watcher(pid, probes, dataclasses.replace(config, single=single),
                      exit_code=popen.poll, extra_logs=tail.logs)
    watcher.start()
    return watcher


def _empty_bundle(popen, tail: OutputTail, config: WatchConfig) -> Bundle:
    """The bundle of a command that ended (or ran out of time) before any rank could be watched."""
    job = Job(run_id=None, master_addr=None, master_port=None, world_size=None, launcher_pid=popen.pid,
              processes=())
    return make_bundle(job, (), ProcFS(), Options(interval_s=config.interval_s, hang_after_s=config.hang_after_s),
                       logs=tail.logs(), exit_code=popen.returncode)


def _ended_before_attach(popen, tail: OutputTail, config: WatchConfig) -> Outcome:
    """The command ended (or --timeout passed) before any process could be watched."""
    if popen.poll() is None:
        bundle = _empty_bundle(popen, tail, config)
        report = report_without_ranks(Verdict.HANG, (_timeout_finding(config),))
        return Outcome(report, bundle, "timeout")
    popen.wait()
    tail.join()
    bundle = _empty_bundle(popen, tail, config)
    verdict = Verdict.HEALTHY if popen.returncode == 0 else Verdict.CRASH
    findings = () if verdict == "healthy" else (finding(
        COMMAND_FAILED, (), f"The command exited with code {popen.returncode} before any rank could be watched",
        list(tail.lines)[-10:]),)
    report = report_without_ranks(verdict, findings)
    return Outcome(report, bundle, "ended")


def _timeout_finding(config: WatchConfig) -> Finding:
    return finding(RUN_TIMEOUT, (), f"The run did not finish within --timeout {config.timeout_s:g} s",
                   ["no rank was blocked long enough for a hang verdict, but the run overstayed its budget"])


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
# The slugs `hangdoc run` raises itself (the registry, hangdoc/registry.py, lists them).
RECORDS = (COMMAND_FAILED, RUN_TIMEOUT)


def _timed_out(outcome: Outcome, config: WatchConfig) -> Outcome:
    """A smoke run that outlives its budget fails like a hang: CI must not wait forever."""
    report = outcome.report
    if report.verdict in ("healthy", "suspect"):
        report = dataclasses.replace(report, verdict="hang", findings=(_timeout_finding(config),) + report.findings)
    return Outcome(report, outcome.bundle, "timeout")
