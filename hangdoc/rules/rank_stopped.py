"""rank-stopped: a culprit rank, or the DataLoader worker it waits on, is stopped (state T): a SIGSTOP,
a Ctrl-Z, a terminal's SIGTTIN or SIGTTOU, or a debugger's stop. It runs no code at all until
something continues it, so no fix in the job's code or data helps; the collective findings stand
back for it (`Cause.PROCESS`)."""
from __future__ import annotations

from hangdoc.base.words import plural
from hangdoc.model import Cause, Finding, RankState, Severity, Verdict
from hangdoc.model.stack import own_frame
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import live_workers, rank_line, worker_name
from hangdoc.rules.samples import chain, latest_frames, samples_of
from hangdoc.rules.waits import at, command, where

MIN_STOPPED = 2        # samples in a row in state T: one could be a stop that a SIGCONT ended at once


def _stopped_run(ctx: Context, pid: int) -> list:
    """The process's newest samples, in a row, that read it stopped (state T; not "t", the tracing
    stop a stack read itself makes): [] when its newest sample does not."""
    run = []
    for time, sample in reversed(samples_of(ctx.bundle, pid)):
        if not sample.alive or sample.proc is None or sample.proc.state != "T":
            break
        run.append((time, sample))
    return run[::-1] if len(run) >= MIN_STOPPED else []


def check(ctx: Context) -> list[Finding]:
    if ctx.diagnosis.verdict != Verdict.HANG:
        return []
    return [_finding(ctx, view, *held) for view in ctx.culprit_views() if (held := _held(ctx, view)) is not None]


def _held(ctx: Context, view) -> tuple | None:
    """(the stopped process, whether it is a worker, its run of stopped samples): the rank itself, else
    the first of its live workers stopped while it waits on its data; None: neither is."""
    if run := _stopped_run(ctx, view.info.pid):
        return view.info, False, run
    if view.reading.state != RankState.DATALOADER:
        return None
    return next(((w, True, run) for w in live_workers(ctx, view.info.pid) if (run := _stopped_run(ctx, w.pid))), None)


def _finding(ctx: Context, view, proc, is_worker: bool, run) -> Finding:
    rank = view.info.rank
    who = f"Rank {rank}'s DataLoader {worker_name(proc)}" if is_worker else f"Rank {rank} (pid {proc.node_pid})"
    first, last = run[0], run[-1]
    cpu = last[1].proc.cpu_s - first[1].proc.cpu_s
    frames = latest_frames(ctx.bundle, proc.pid)
    line = own_frame(frames)
    evidence = [rank_line(ctx, view)]
    evidence.append(f"{who[0].lower()}{who[1:]}: state T (stopped) at each of its last {len(run)} samples, over "
                    f"{last[0] - first[0]:.1f} s, with {cpu:.2f} s of CPU: it runs no code")
    if frames:
        evidence.append((f"it stopped at {at(line)}; " if line else "") + f"stack: {chain(frames)}")
    parent = ctx.bundle.job.info(proc.ppid)
    if parent is not None:
        evidence.append(f"its parent: pid {parent.node_pid} ({command(parent, width=100)})")
    if is_worker:
        evidence.append(f"rank {rank} waits for its data in DataLoader.__next__, which this worker holds")
    waiting = ctx.diagnosis.count(ctx.diagnosis.waiting)
    if waiting:
        evidence.append(f"{plural(waiting, 'other rank')} {'waits' if waiting == 1 else 'wait'} for it in "
                        f"{ctx.diagnosis.waiting[0].reading.detail or 'a collective'}")
    title = f"{who} is stopped{where(line)} (SIGSTOP, Ctrl-Z, a terminal's stop or a debugger): it runs no code"
    return finding(RULE, [rank], title, evidence, _fix(proc.node_pid))


def _fix(pid: int) -> str:
    return (f"Continue it: `kill -CONT {pid}` (a job stopped by Ctrl-Z: `fg` or `bg` in its shell). Then stop "
            f"what stopped it: a debugger or tracer attached (gdb -p, strace -p; `grep TracerPid /proc/{pid}/status` "
            "names it) keeps it stopped until it detaches; a job started in a shell's background stops when it "
            "reads the terminal or writes to it (SIGTTIN, SIGTTOU): start it with nohup or setsid and stdin from "
            "/dev/null; a script or scheduler that suspends jobs with SIGSTOP or SIGTSTP resumes them with SIGCONT. "
            "The ranks waiting for it need no change.")


RULE = Rule(
    slug="rank-stopped",
    title="A rank, or the worker it waits on, is stopped (state T)",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang when a culprit rank, or a live DataLoader worker of a culprit waiting on its "
            "data, reads state T (stopped) at its newest samples, at least 2 in a row: a SIGSTOP, a Ctrl-Z "
            "(SIGTSTP), a terminal's SIGTTIN or SIGTTOU, or a debugger's stop. Not state t, the tracing stop "
            "a stack read makes for an instant. Names the process, how long it has been stopped, the line it "
            "stopped at and its parent.",
    fix="Continue it with `kill -CONT PID` (`fg` or `bg` for a job stopped by Ctrl-Z), and stop what stopped "
        "it: detach a debugger or tracer (TracerPid in /proc/PID/status), start a background job with nohup "
        "or setsid and stdin from /dev/null, resume what a scheduler suspended.",
    causes=frozenset({Cause.PROCESS, Cause.WORKERS}),
)
