"""`hangdoc run -- CMD`: start a training command, watch it, and end it on a hang.

The command runs in a session of its own so that on a hang hangdoc can end exactly
the job it started (the launcher's group, and every rank's own session), nothing else.
Its output streams through and a bounded, redacted tail is kept for the log rules.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, TextIO

from hangdoc.base.limits import MAX_LINE_CHARS, cut_line
from hangdoc.base.errors import EXIT_SIGINT, STOP_SIGNALS, HangdocError, NotDistributed
from hangdoc.base.redact import LineRedactor, redact_text
from hangdoc.collect.discover import find_job, is_python, looks_like_launcher, spawns_children
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.spawned import StackRanks
from hangdoc.live.capture import make_bundle
from hangdoc.live.options import WatchOptions
from hangdoc.live.proc import RunningJob, become_subreaper, end_outliving, own_children, stop_job
from hangdoc.live.step import any_rank_alive
from hangdoc.live.watcher import Outcome, Watcher
from hangdoc.model import Bundle, Ending, GpuState, Job, LogTail, Snapshot, StopReason, Verdict
from hangdoc.report.judge import End, judge, with_outlived

TAIL_LINES = 2000
# A command with no ranks after this long is watched as a single process: soon for a plain
# script, later for a launcher (torchrun, deepspeed, a script whose mp.spawn ranks are starting)
# whose ranks take a while to appear: torchrun's elastic rendezvous (--nnodes=MIN:MAX) waits 30 s
# for more nodes before it starts any rank, and torch's import on a busy node adds to that.
SINGLE_AFTER_S = 2.0
LAUNCHER_SINGLE_AFTER_S = 120.0


# What torchrun's launcher raises when it is sent SIGTERM: the last line of the traceback it prints
# as hangdoc ends the job, which is the teardown, not the job's failure.
SIGNAL_EXCEPTION = "SignalException: Process "


class OutputTail:
    """Copies the job's output to `sink` line by line and keeps the last lines, redacted.

    Once hangdoc ends the job (`ending`), a traceback that ends in the launcher's SignalException
    is held back from both: it says hangdoc's SIGTERM arrived, and a CI log would read it as the
    job's failure. Any other traceback is shown when it ends (or the output does)."""

    def __init__(self, stream, sink: TextIO, max_lines: int = TAIL_LINES):
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.left_out = 0                 # lines of the launcher's teardown traceback held back
        self._sink = sink
        self._redact = LineRedactor()
        self._ending = False
        self._held: list[str] = []
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def ending(self) -> None:
        """hangdoc is about to end the job: what its launcher prints of the SIGTERM is teardown."""
        self._ending = True

    def say_ended(self, failed: bool = False) -> None:
        """The one line that takes the teardown traceback's place. `failed`: the job had failed on
        its own (a crash) and hangdoc stopped what was left of it (a launcher still tearing down)."""
        gone = f"; its launcher's SignalException traceback ({self.left_out} lines) is left out" if self.left_out else ""
        said = ("the job had failed on its own; hangdoc stopped what was left of it" if failed
                else "the job was ended by hangdoc, not by a failure of its own")
        self._write(f"hangdoc: {said}{gone}\n")

    def _pump(self, stream) -> None:
        while True:
            raw = stream.readline(MAX_LINE_CHARS)
            if not raw:
                break
            if len(raw) == MAX_LINE_CHARS and not raw.endswith(b"\n"):
                self._long_line(stream, raw)
                continue
            text = raw.decode("utf-8", "replace")
            if self._ending and (self._held or text.startswith("Traceback (most recent call last):")):
                self._held.append(text)
                if SIGNAL_EXCEPTION in text:
                    self.left_out += len(self._held)
                    self._held = []
                continue
            self._keep(text)
        held, self._held = self._held, []
        for text in held:          # a traceback of something else, cut short by the end of the output
            self._keep(text)

    def _long_line(self, stream, head: bytes) -> None:
        """A line past the bound (a 280 MB one, 31 MB of `\r` progress): streamed through to the sink
        as it comes, kept as its head and tail with the cut said, never whole in memory."""
        self._write(head.decode("utf-8", "replace"))
        tail, total = b"", len(head)
        while True:
            more = stream.readline(MAX_LINE_CHARS)
            if not more:
                break
            self._write(more.decode("utf-8", "replace"))
            total += len(more)
            tail = (tail + more)[-MAX_LINE_CHARS:]
            if more.endswith(b"\n"):
                break
        text = (head[:MAX_LINE_CHARS // 2] + tail[-MAX_LINE_CHARS // 2:]).decode("utf-8", "replace").rstrip("\n")
        self.lines.append(self._redact(cut_line(text, total=total)))

    def _keep(self, text: str) -> None:
        self._write(text)     # the job's output as it came; the lines kept lose their NULs (logline.RANK_PREFIX)
        self.lines.append(self._redact(text.rstrip("\n").replace("\x00", "")))

    def _write(self, text: str) -> None:
        try:
            self._sink.write(text)
            self._sink.flush()
        except (OSError, ValueError):
            pass

    def logs(self) -> tuple[LogTail, ...]:
        return (LogTail(source="<output of the command>", lines=tuple(self.lines)),) if self.lines else ()

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)


@dataclass
class RunResult:
    outcome: Outcome                  # its judgement's exit code is the run's
    job_exit_code: int | None
    interrupted: int | None = None    # stopped by Ctrl-C or SIGTERM: the exit code to leave with (130 / 143)


def run_command(cmd: list[str], options: WatchOptions, probes, sink: TextIO,
                on_sample: Callable | None = None, sleep: Callable[[float], None] = time.sleep,
                fail_on_slow: bool = False, recorder=None) -> RunResult:
    """Run `cmd` under watch until it ends, crashes, hangs or `options.timeout_s` passes.
    `fail_on_slow`: a slow run that ends well fails (EXIT_SLOW) instead of passing with its code.
    `recorder`: a `bundle.recording.Recorder` every round is written to (`run --record DIR`)."""
    others = own_children()
    become_subreaper()        # the job's daemons (double fork + setsid) are re-parented here, found and ended
    try:
        popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True,
                                 env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except OSError as exc:       # the bundle, JUnit result and step summary still say so
        return _not_started(cmd, options, f"cannot start {cmd[0]!r}: {exc.strerror or exc}")
    job = RunningJob(popen, others=others)
    tail = OutputTail(popen.stdout, sink)
    began = time.monotonic()
    watcher = None
    interrupted = None
    outcome = None
    try:
        watcher = _attach(popen, job, options, probes, tail, began, sleep, recorder)
        outcome = _follow(watcher, popen, job, tail, options, on_sample, began, fail_on_slow)
    except KeyboardInterrupt as exc:     # Ctrl-C, or SIGTERM (hangdoc.base.errors.Interrupted)
        _hold_signals()                  # a second one must not lose the job's end or the report
        interrupted = getattr(exc, "exit_code", EXIT_SIGINT)
    finally:
        ended_here = popen.poll() is None
        if ended_here:
            tail.ending()
        interrupted = _stop(job, popen, interrupted)
        tail.join()
        if ended_here:
            tail.say_ended(failed=outcome is not None and outcome.judgement.report.verdict == Verdict.CRASH)
    if interrupted is None and outcome is not None and outcome.reason is StopReason.CRASH:
        outcome = _to_the_last_line(watcher, outcome, options, popen, fail_on_slow)
    if interrupted is not None:
        ending = End(Ending.INTERRUPTED, signal_exit=interrupted, returncode=popen.returncode, run=True)
        outcome = (watcher.stopped(interrupted, ending) if watcher is not None else None) or \
            _unwatched(_empty_bundle(popen, tail, options), ending, StopReason.INTERRUPTED)
    if job.unended:            # what ending the job left running, named in the report
        if watcher is not None:
            watcher.record("outlived", names=list(job.unended))
        outcome = dataclasses.replace(outcome, judgement=dataclasses.replace(
            outcome.judgement, report=with_outlived(outcome.judgement.report, tuple(job.unended))))
    return RunResult(outcome, popen.returncode, interrupted)


def _follow(watcher: Watcher | None, popen, job: RunningJob, tail: OutputTail, options: WatchOptions,
            on_sample: Callable | None, began: float, fail_on_slow: bool) -> Outcome:
    """Watch the command's ranks until it ends, crashes, hangs or runs out of time."""
    if watcher is None:
        return _ended_before_attach(popen, job, tail, options, fail_on_slow)
    remaining = None if options.timeout_s is None else max(0.0, options.timeout_s - (time.monotonic() - began))
    watcher.options = dataclasses.replace(watcher.options, timeout_s=remaining)
    outcome = watcher.run(on_sample, ended=lambda: popen.poll() is not None, on_round=job.refresh_tree)
    if outcome.reason is StopReason.ENDED:
        popen.wait()
        tail.join()
        if watcher.samples and any_rank_alive(watcher.samples[-1], watcher.job):
            # The command ended after the round that last saw its ranks: one more round sees them
            # gone (a command that was itself the rank is reaped by us before any record of its exit).
            watcher.step()
        bundle = watcher.bundle()     # with the command's exit code and its last output
        ending = End(Ending.ENDED, returncode=popen.returncode, run=True, fail_on_slow=fail_on_slow,
                     outlived=_outlived(job))
        return Outcome(watcher.judge(bundle, ending), bundle, StopReason.ENDED)
    kind = Ending.TIMED_OUT if outcome.reason is StopReason.TIMEOUT else Ending.RUNNING
    ending = End(kind, timeout_s=options.timeout_s, returncode=popen.poll(), run=True, fail_on_slow=fail_on_slow)
    return dataclasses.replace(outcome, judgement=watcher.judge(outcome.bundle, ending))


def _to_the_last_line(watcher: Watcher, outcome: Outcome, options: WatchOptions, popen,
                      fail_on_slow: bool) -> Outcome:
    """A crash told while the job still ran, judged again on everything it printed: the rank's
    last lines (its traceback naming the DataLoader worker that died) can reach hangdoc's reading
    of its output after the round that saw the rank gone. The samples are the same."""
    bundle = watcher.bundle()
    ending = End(Ending.RUNNING, timeout_s=options.timeout_s, returncode=popen.returncode, run=True,
                 fail_on_slow=fail_on_slow)
    return Outcome(watcher.judge(bundle, ending), bundle, outcome.reason)


def _stop(job: RunningJob, popen, interrupted: int | None) -> int | None:
    """End the job if it still runs. A Ctrl-C or SIGTERM that came while it was being ended waits
    for the end (stop_job), then stops the run: its report is the one of what was seen so far."""
    if popen.poll() is not None:
        return interrupted
    try:
        stop_job(job)
    except KeyboardInterrupt as exc:
        _hold_signals()
        return interrupted if interrupted is not None else getattr(exc, "exit_code", EXIT_SIGINT)
    return interrupted


def _hold_signals() -> None:
    for number in STOP_SIGNALS:
        try:
            signal.signal(number, signal.SIG_IGN)
        except ValueError:      # not the main thread: nothing to hold
            pass


def _attach(popen, job: RunningJob, options: WatchOptions, probes, tail: OutputTail, began: float,
            sleep, recorder=None) -> Watcher | None:
    """Wait until the command's ranks exist (or it ends, or it is a lone Python process)."""
    launcher = looks_like_launcher(probes.procfs, popen.pid)
    stacks = StackRanks()           # each child's stack is read for its rank once it says one
    while popen.poll() is None:
        job.refresh_tree()
        # A script whose multiprocessing children are ranks still starting (mp.spawn) waits as a launcher does.
        spawner = launcher or spawns_children(popen.pid, probes.procfs)
        single = time.monotonic() - began >= (LAUNCHER_SINGLE_AFTER_S if spawner else SINGLE_AFTER_S)
        try:
            find_job(popen.pid, probes.procfs, single=single, stack_ranks=stacks)
        except NotDistributed:
            pass
        except HangdocError:
            if single:
                # The command is a wrapper (a shell): watch the first Python process below it.
                child = _python_descendant(job, probes)
                if child is not None:
                    return _start(child, probes, options, popen, tail, single=True, recorder=recorder)
        else:
            return _start(popen.pid, probes, options, popen, tail, single=single, recorder=recorder)
        if options.timeout_s is not None and time.monotonic() - began >= options.timeout_s:
            return None
        sleep(0.2)
    return None


def _python_descendant(job: RunningJob, probes) -> int | None:
    for pid in sorted(job.refresh_tree()):
        try:
            if is_python(probes.procfs.cmdline(pid), probes.procfs.exe(pid)):
                return pid
        except Exception:
            continue
    return None


def _start(pid: int, probes, options: WatchOptions, popen, tail: OutputTail, single: bool,
           recorder=None) -> Watcher:
    watcher = Watcher(pid, probes, dataclasses.replace(options, single=single),
                      exit_code=popen.poll, extra_logs=tail.logs, recorder=recorder)
    watcher.start()
    return watcher


def _empty_bundle(popen, tail: OutputTail, options: WatchOptions) -> Bundle:
    """The bundle of a command that ended (or ran out of time) before any rank could be watched."""
    job = Job(run_id=None, master_addr=None, master_port=None, world_size=None, launcher_pid=popen.pid,
              processes=())
    record = dataclasses.replace(options.record("py-spy"), native=False, nonblocking=False)
    return make_bundle(job, (), ProcFS(), record, logs=tail.logs(), exit_code=popen.returncode)


def saveable(bundle: Bundle) -> Bundle:
    """The bundle `run` saves: a command that ended before any rank could be watched has no sample,
    and a bundle without one is not read back; it gets one empty round, at its end, so the bundle
    replays (`hangdoc report`) with the command's exit code and its last output."""
    if bundle.samples:
        return bundle
    end = Snapshot(time=bundle.created, took_s=0.0, processes=(),
                   gpu=GpuState("unavailable", "no process of the command was watched"))
    return dataclasses.replace(bundle, samples=(end,))


def _ended_before_attach(popen, job: RunningJob, tail: OutputTail, options: WatchOptions,
                         fail_on_slow: bool) -> Outcome:
    """The command ended (or --timeout passed) before any process could be watched."""
    if popen.poll() is None:
        ending = End(Ending.TIMED_OUT, timeout_s=options.timeout_s, run=True)
        return _unwatched(_empty_bundle(popen, tail, options), ending, StopReason.TIMEOUT)
    popen.wait()
    tail.join()
    ending = End(Ending.COMMAND_EXITED, returncode=popen.returncode, output_tail=tuple(tail.lines), run=True,
                 fail_on_slow=fail_on_slow, outlived=_outlived(job))
    return _unwatched(_empty_bundle(popen, tail, options), ending, StopReason.ENDED)


def _not_started(cmd: list[str], options: WatchOptions, why: str) -> RunResult:
    """The result of a command that could not start (no such file, not executable): exit 2, with a
    bundle of one line (the why) that `run` saves and reports as any other ending."""
    why = redact_text(why)
    job = Job(run_id=None, master_addr=None, master_port=None, world_size=None, launcher_pid=None, processes=())
    record = dataclasses.replace(options.record("py-spy"), native=False, nonblocking=False)
    # 127: a shell's code for a command it could not start, so the bundle replays as a failed command
    bundle = make_bundle(job, (), ProcFS(), record, logs=(LogTail(source="hangdoc", lines=(why,)),), exit_code=127)
    ending = End(Ending.COMMAND_EXITED, output_tail=(why,), run=True, cannot_start=why)
    return RunResult(_unwatched(bundle, ending, StopReason.ENDED), None)


def _outlived(job: RunningJob) -> tuple[str, ...]:
    """What the command left running (a `setsid` daemon, a server, a double-forked one): ended, and
    said in the report, each with whether it could be ended."""
    return end_outliving(job)


def _unwatched(bundle: Bundle, ending: End, reason: StopReason) -> Outcome:
    return Outcome(judge(bundle, ending), bundle, reason)
