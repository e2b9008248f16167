"""What a worker does, for the evidence lines: how long it has been blocked in its system call (on
the analysis' clock, `Context.blocked_for`), else its state and frame."""
from __future__ import annotations


def worker_doing(ctx, worker, reading) -> str:
    """"blocked opening /mnt/x.tar for 13 s", "decompressing in DecompressReader.read": one worker."""
    held = ctx.blocked_for(worker.pid)
    if held is not None:
        return f"blocked {reading.detail} for {held:.0f} s"
    return f"{reading.state} in {reading.frame.shown_name if reading.frame else '?'}"
