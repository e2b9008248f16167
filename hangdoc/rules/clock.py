"""How long, for the evidence lines: on the report's one clock (analyze/clock.py), and how long a
worker has been blocked in its system call. Pure: the bundle's timelines only."""
from __future__ import annotations

from hangdoc.analyze.clock import since_on_clock, off_cpu_since
from hangdoc.model import WorkerState


def on_clock(ctx, since: float) -> float:
    """`since` on the report's one clock (analyze/clock.py): the onset, where the state was held
    from the first sample and the past dates the stall earlier."""
    first = ctx.bundle.samples[0].time if ctx.bundle.samples else since
    return since_on_clock(since, ctx.diagnosis.onset, first)


def blocked_for(ctx, pid: int) -> float | None:
    """How long a worker has been blocked in its system call: from when hangdoc saw it enter the
    call, or, blocked since its first sample, from when the kernel last ran it before that."""
    line = ctx.timelines.get(pid)
    if line is None or line.last.reading.state != WorkerState.BLOCKED:
        return None
    return ctx.diagnosis.decided_at - off_cpu_since(line.points, line.state_since())


def worker_doing(ctx, worker, reading) -> str:
    """"blocked opening /mnt/x.tar for 13 s", "decompressing in DecompressReader.read": one worker."""
    held = blocked_for(ctx, worker.pid)
    if held is not None:
        return f"blocked {reading.detail} for {held:.0f} s"
    return f"{reading.state} in {reading.frame.shown_name if reading.frame else '?'}"
