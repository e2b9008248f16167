"""Evidence lines shared by rules: a rank's frames, its workers, its GPU."""
from __future__ import annotations

from hangdoc.analyze.diagnose import RankView
from hangdoc.model import Bundle


def frames_line(bundle: Bundle, pid: int, depth: int = 6) -> str | None:
    sample = bundle.last.sample_of(pid)
    main = sample.stack.main if sample and sample.stack else None
    if main is None:
        return None
    return " <- ".join(f.label for f in main.frames[:depth])


def rank_line(view: RankView, now: float) -> str:
    frame = view.reading.frame.label if view.reading.frame else "no stack"
    detail = f" in {view.reading.detail}" if view.reading.detail else ""
    who = f"rank {view.info.rank}" if view.info.rank is not None else "process"
    return (f"{who} (pid {view.info.pid}): {view.reading.state}{detail} "
            f"for {now - view.state_since:.0f} s at {frame}")


def worker_lines(view: RankView) -> list[str]:
    lines = []
    for worker, reading, alive in view.workers:
        where = reading.frame.label if reading.frame else "-"
        index = worker.worker_index if worker.worker_index is not None else "?"
        lines.append(f"  worker {index} (pid {worker.pid}): {reading.state if alive else 'exited'} at {where}")
    return lines
