"""Each process over time: its state at every sample, whether it moves, and for how long it has not.

Whether a rank *progressed* between two samples is decided from the job's own loop
(`analyze/progress.py`); CPU time and bytes here are hints that it is busy, never proof
that it stepped: NCCL moves its bytes outside the host's syscalls, and a small model's
all-reduce moves a few bytes a step.
"""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.analyze.classify import Reading, classify_rank, classify_worker, signature
from hangdoc.model import Bundle, LoopMark, ProcSample, Role, ThreadCounters

# Bytes a process may move between samples without it counting as progress (store pings).
IO_NOISE_BYTES = 4096
CPU_NOISE_S = 0.02


@dataclass(frozen=True)
class Point:
    time: float
    reading: Reading
    sig: tuple
    cpu_s: float | None
    io_bytes: int | None
    loop: LoopMark | None = None           # the main thread's loop position, when locals were read
    main: ThreadCounters | None = None     # the kernel's counters of the main thread
    fresh: bool = True                     # False: no stack this round, the reading carried on


def _point(time: float, sample: ProcSample | None, worker: bool) -> Point:
    reading = classify_worker(sample) if worker else classify_rank(sample)
    proc = sample.proc if sample else None
    io = proc.io.rchar + proc.io.wchar if proc and proc.io else None
    main = sample.stack.main if sample and sample.stack else None
    return Point(time, reading, signature(sample), proc.cpu_s if proc else None, io,
                 main.loop if main else None, proc.main_thread if proc else None)


def moved(a: Point, b: Point) -> bool:
    """Did the process do anything between two points (CPU or bytes)?"""
    cpu = a.cpu_s is not None and b.cpu_s is not None and b.cpu_s - a.cpu_s > CPU_NOISE_S
    return cpu or moved_bytes(a, b)


def moved_bytes(a: Point, b: Point) -> bool:
    return a.io_bytes is not None and b.io_bytes is not None and b.io_bytes - a.io_bytes > IO_NOISE_BYTES


@dataclass(frozen=True)
class Timeline:
    pid: int
    points: tuple[Point, ...]

    @property
    def last(self) -> Point:
        return self.points[-1]

    def state_since(self) -> float:
        """When the process entered its current state (same state and detail), as far as we saw."""
        start = self.last
        for point in reversed(self.points[:-1]):
            if (point.reading.state, point.reading.detail) != (start.reading.state, start.reading.detail):
                break
            start = point
        return start.time

    def unmoved_since(self) -> float:
        """Start of the trailing run with the same frames and no CPU or bytes moved."""
        start = self.last
        for point in reversed(self.points[:-1]):
            if point.sig != start.sig or moved(point, start):
                break
            start = point
        return start.time


def timelines(bundle: Bundle) -> dict[int, Timeline]:
    """A timeline for every rank and worker of the bundle, over all its samples."""
    roles = {p.pid: p.role for p in bundle.job.processes}
    points: dict[int, list[Point]] = {pid: [] for pid, role in roles.items()
                                      if role in (Role.RANK, Role.WORKER)}
    for snapshot in bundle.samples:
        for pid, series in points.items():
            sample = snapshot.sample_of(pid)
            if sample is None:
                continue   # not yet born, or not sampled this time
            if sample.stack is None and sample.alive and series:
                # stacks skipped this round (a worker sampled less often): carry the reading on
                prev = series[-1]
                proc = sample.proc
                series.append(Point(snapshot.time, prev.reading, prev.sig,
                                    proc.cpu_s if proc else None,
                                    proc.io.rchar + proc.io.wchar if proc and proc.io else None,
                                    prev.loop, proc.main_thread if proc else None, fresh=False))
                continue
            series.append(_point(snapshot.time, sample, roles[pid] is Role.WORKER))
    return {pid: Timeline(pid, tuple(series)) for pid, series in points.items() if series}
