"""Each process over time: its state at every sample, whether it moves, and for how long it has not.

A rank is *blocked* in a collective when sample after sample it sits at the same frames
and neither reads nor writes a byte: a completed step always moves bytes (the gradient
all-reduce over gloo's sockets, the next batch through the worker pipes), so a rank that
moves none has not stepped, however often it is caught on the same line.
"""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.analyze.classify import Reading, classify_rank, classify_worker, signature
from hangdoc.model import Bundle, ProcSample, Role

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


def _point(time: float, sample: ProcSample | None, worker: bool) -> Point:
    reading = classify_worker(sample) if worker else classify_rank(sample)
    proc = sample.proc if sample else None
    io = proc.io.rchar + proc.io.wchar if proc and proc.io else None
    return Point(time, reading, signature(sample), proc.cpu_s if proc else None, io)


def moved(a: Point, b: Point) -> bool:
    """Did the process do anything between two points (CPU or bytes)?"""
    cpu = a.cpu_s is not None and b.cpu_s is not None and b.cpu_s - a.cpu_s > CPU_NOISE_S
    io = a.io_bytes is not None and b.io_bytes is not None and b.io_bytes - a.io_bytes > IO_NOISE_BYTES
    return cpu or io


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

    def blocked_since(self) -> float | None:
        """Start of the trailing run in which it sat in one collective and moved no bytes."""
        last = self.last
        if last.reading.state != "collective-wait":
            return None
        start = last
        for point in reversed(self.points[:-1]):
            if point.reading.state != "collective-wait" or point.sig != last.sig or moved_bytes(point, start):
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
                                    proc.io.rchar + proc.io.wchar if proc and proc.io else None))
                continue
            series.append(_point(snapshot.time, sample, roles[pid] is Role.WORKER))
    return {pid: Timeline(pid, tuple(series)) for pid, series in points.items() if series}


def progress(timeline: Timeline, worker_lines: list[Timeline]) -> str:
    """"active" (its frames changed), "slow" (same frames, but it or its workers move), "stuck"."""
    if len(timeline.points) < 2:
        return "active"
    prev, last = timeline.points[-2], timeline.last
    if prev.sig != last.sig:
        return "active"
    if moved(prev, last) or any(len(w.points) >= 2 and moved(w.points[-2], w.last) for w in worker_lines):
        return "slow"
    return "stuck"
