"""What each witness of progress said over a quiet stretch: the evidence that nothing moves. Pure.

A hang is called from positive evidence, never from a step not seen: the loop's counters where
they can be read, the stack going round the loop, the ranks' main threads (CPU, going to sleep
and waking; a socket read woken by its data), the bytes they move (gloo's sockets, their workers'
pipes), their workers. The report lists each with what it said over the stretch the verdict rests
on, so a reader sees what hangdoc had and did not have.
"""
from __future__ import annotations

from collections.abc import Sequence

from hangdoc.analyze.progress import counted, new_ground, region
from hangdoc.analyze.timeline import (CPU_NOISE_S, IO_NOISE_BYTES, WAKEUPS_PER_DUMP, Point, Timeline, moved, read_forward,
                                      receiving)
from hangdoc.base.words import plural
from hangdoc.model import GpuActivity, Witness


def _window(line: Timeline, since: float, fresh: bool = True) -> list[Point]:
    """The points from `since` on; with `fresh`, only those with a stack of their own (a point
    without one carries the last stack on, with this round's CPU and bytes)."""
    return [p for p in line.points if (p.fresh or not fresh) and p.time >= since]


def job_witnesses(ranks: Sequence[tuple[int | None, Timeline]], workers: Sequence[Timeline],
                  since: float, outputs: Sequence[tuple[float, int | None]] = ()) -> tuple[Witness, ...]:
    """What each witness said of the ranks (rank number, timeline), their live workers and the job's
    output (each sample's time and the step its output had printed last) since `since`. A witness
    that could not be read says so (moved None)."""
    windows = [(rank, _window(line, since)) for rank, line in ranks]
    windows = [(rank, points) for rank, points in windows if len(points) >= 2]
    if not windows:
        return ()
    gpu = _gpus(windows)
    return (_counters(windows), _stack(windows), _threads(windows), _bytes(windows), _workers(workers, since),
            _output(outputs, since)) + ((gpu,) if gpu is not None else ())


def _name(rank: int | None) -> str:
    return f"rank {rank}" if rank is not None else "a rank"


def _counters(windows) -> Witness:
    readable = [rank for rank, points in windows if any(p.loop is not None and counted(p.loop) for p in points)]
    if not readable:
        return Witness("loop counters", None, "none could be read (no frame of the job's code holds an integer: "
                                              "a loop at module level, or counters kept in objects)")
    moved_on = [rank for rank, points in windows if rank in readable and any(
        dict(c) != dict(d) for a, b in zip(points, points[1:]) if a.loop is not None and b.loop is not None
        for c, d in zip((f.counters for f in a.loop.frames), (f.counters for f in b.loop.frames)))]
    where = f"read on {len(readable)} of {plural(len(windows), 'rank')}"
    if moved_on:
        return Witness("loop counters", True, f"{where}; moved on {', '.join(_name(r) for r in moved_on)}")
    return Witness("loop counters", False, f"{where}; they stood")


def _stack(windows) -> Witness:
    went = [rank for rank, points in windows
            if any(region(a.sig) != region(b.sig) for a, b in zip(points, points[1:]) if a.sig and b.sig)]
    if went:
        return Witness("stack", True, f"the job's own frames moved on {', '.join(_name(r) for r in went)}")
    return Witness("stack", False, "every rank stood at one place in its own code")


def _threads(windows) -> Witness:
    parts, awake = [], False
    for rank, points in windows:
        a, b = points[0].main, points[-1].main
        if a is None or b is None:
            continue
        cpu = b.cpu_s - a.cpu_s
        wakes = b.voluntary_switches - a.voluntary_switches
        reads = WAKEUPS_PER_DUMP * (len(points) - 1)
        span = points[-1].time - points[0].time
        if any(receiving(p, q) for p, q in zip(points, points[1:])):
            awake = True
            parts.append(f"{_name(rank)} received data in a socket read (woke {wakes} times, {cpu:.2f} s of CPU; "
                         "bytes /proc/PID/io does not count)")
        elif wakes > reads + len(points) and cpu > CPU_NOISE_S:
            awake = True
            parts.append(f"{_name(rank)} woke {wakes} times ({cpu:.2f} s of CPU)")
        elif span > 0 and cpu >= 0.5 * span:
            parts.append(f"{_name(rank)} burned {cpu:.1f} s of CPU in {span:.0f} s without sleeping (a spin)")
        else:
            own = f", about {min(wakes, reads)} of them hangdoc's stack reads" if wakes else ""
            parts.append(f"{_name(rank)} asleep ({cpu:.2f} s of CPU, {plural(wakes, 'wake-up')}{own})")
    if not parts:
        return Witness("main threads", None, "the kernel's thread counters could not be read")
    return Witness("main threads", awake, "; ".join(parts))


def _bytes(windows) -> Witness:
    deltas = [(rank, points[-1].io_bytes - points[0].io_bytes) for rank, points in windows
              if points[0].io_bytes is not None and points[-1].io_bytes is not None]
    if not deltas:
        return Witness("bytes", None, "/proc/PID/io could not be read")
    busy = [(rank, d) for rank, d in deltas if d > IO_NOISE_BYTES * (len(windows[0][1]) - 1)]
    if busy:
        return Witness("bytes", True, "; ".join(f"{_name(r)} moved {d / 1e6:.1f} MB" for r, d in busy))
    return Witness("bytes", False, f"{sum(d for _, d in deltas)} bytes in all (files, pipes, gloo's sockets: "
                                   "what read() and write() move)")


def _workers(workers: Sequence[Timeline], since: float) -> Witness:
    windows = [w for w in (_window(line, since, fresh=False) for line in workers) if len(w) >= 2]
    if not windows:
        return Witness("workers", None, "no live DataLoader worker was read")
    busy = sum(1 for points in windows if moved(points[0], points[-1]))
    data = _data_words(workers, windows)
    if busy:
        return Witness("workers", True, f"{busy} of {plural(len(windows), 'worker')} used CPU or moved bytes{data}")
    return Witness("workers", False, f"all {plural(len(windows), 'worker')} still")


def _gpus(windows) -> Witness | None:
    """What the ranks' GPUs did (None: no GPU was read, a CPU job: no witness to list). A spinning
    GPU (NCCL's kernel waiting on a flag, 100 % utilisation) did nothing; one at work moved memory."""
    read = [(rank, [p.gpu for p in points if p.gpu is not None]) for rank, points in windows]
    read = [(rank, acts) for rank, acts in read if acts]
    if not read:
        return None
    busy = [rank for rank, acts in read if acts.count(GpuActivity.BUSY) >= 2]
    if busy:
        return Witness("GPUs", True, f"{', '.join(_name(r) + chr(39) + 's' for r in busy)} GPU at work "
                                     "(kernels moving memory and drawing power)")
    said = "; ".join(f"{_name(rank)}'s GPU {_gpu_word(acts)}" for rank, acts in read)
    return Witness("GPUs", False, said)


def _gpu_word(acts: list) -> str:
    if all(a is GpuActivity.SPIN for a in acts):
        return "spun (100 % with no memory traffic: a collective's kernel waiting)"
    if all(a is GpuActivity.IDLE for a in acts):
        return "idle"
    return "spun or idled"


def _data_words(workers: Sequence[Timeline], windows: list[list[Point]]) -> str:
    """What the workers' read offsets did in the window: new ground (progress), or only the part of
    their files read before again (a rewind: random access into a compressed stream)."""
    for line in workers:
        new_ground(line)          # each point's memo now holds the bytes of new ground up to it
    fresh = sum(points[-1].memo["ground"][1] - points[0].memo["ground"][1] for points in windows
                if "ground" in points[0].memo and "ground" in points[-1].memo)
    if fresh > IO_NOISE_BYTES:
        return f"; they read {fresh / 1e6:.1f} MB of their files they had not read before"
    known = [[p for p in points if p.reads is not None] for points in windows]
    again = sum(read_forward(a, b) for points in known for a, b in zip(points, points[1:]))
    if again > IO_NOISE_BYTES:
        return (f"; they read {again / 1e6:.1f} MB, all of it a part of their files read before (they went "
                "back: no new data)")
    return ""


def _output(outputs: Sequence[tuple[float, int | None]], since: float) -> Witness:
    steps = [step for time, step in outputs if time >= since and step is not None]
    if not steps:
        return Witness("output", None, "no step line read in the job's output (none written to a file hangdoc "
                                       "could read, or none printed)")
    if max(steps) > steps[0]:
        return Witness("output", True, f"the job printed step {steps[0]} then step {max(steps)}")
    return Witness("output", False, f"the last step the job printed stayed at {steps[-1]}")
