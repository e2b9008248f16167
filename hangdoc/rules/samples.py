"""What the samples of one process say, for the evidence a rule cites: its samples, its frames
and the line it was found at most often, the CPU it used, the files it read and how fast, its
kernel wait. Each answer is worked out once per bundle."""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from hangdoc.model.stack import own_frame, signature
from hangdoc.base.syscalls import syscall_name
from hangdoc.base.words import mb
from hangdoc.model import Bundle, Frame, ProcSample


def rate(n: float) -> str:
    return f"{n / 1e6:.1f} MB/s" if n >= 1e5 else f"{n / 1e3:.0f} kB/s"


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def samples_of(bundle: Bundle, pid: int) -> list[tuple[float, ProcSample]]:
    """(time, sample) for every snapshot that sampled `pid`, oldest first."""
    return list(_kept(bundle, ("samples", pid), lambda: [
        (snap.time, sample) for snap in bundle.samples if (sample := snap.sample_of(pid)) is not None]))


def _kept(bundle: Bundle, key, work):
    """`work()`, once per bundle and key: the rules ask for the same few processes' samples and
    reads over and over. Only the last bundle's answers are kept."""
    cached_bundle, answers = _KEPT
    if cached_bundle is not bundle:
        answers = {}
        _KEPT[:] = [bundle, answers]
    if key not in answers:
        answers[key] = work()
    return answers[key]


_KEPT: list = [None, {}]


def latest_frames(bundle: Bundle, pid: int) -> tuple[Frame, ...]:
    """The main thread's frames (innermost first) from the newest sample that has a stack."""
    for _, sample in reversed(samples_of(bundle, pid)):
        if sample.stack is not None and sample.stack.main is not None:
            return signature(sample)   # a native probe's Python frames stand for its stack
    return ()


def recent_worker_frames(bundle: Bundle, pid: int, shows, recent: int = 8) -> tuple[Frame, ...] | None:
    """A worker's frames (above its loop) from the newest of its last `recent` stacks for which
    `shows(frames)` is true: one instant may catch a worker between two calls of what it spends
    its time in (features between two decompressions), so the last stack alone misses it."""
    stacks = (s.stack.main.frames for _, s in reversed(samples_of(bundle, pid)) if s.stack and s.stack.main)
    for frames in itertools.islice(stacks, recent):
        above = above_worker_loop(frames)
        if shows(above):
            return above
    return None


def most_common_line(stacks: list[tuple[Frame, ...]]) -> tuple[str, int] | None:
    """The job's own line (innermost of the job's code in each stack) found most often among
    `stacks`, with how often; None with no such line."""
    labels = Counter(frame.label for frames in stacks if (frame := own_frame(frames)) is not None)
    return labels.most_common(1)[0] if labels else None


def usual_line(bundle: Bundle, pid: int) -> tuple[str, int, int] | None:
    """The job's own line `pid`'s main thread was found at most often over its samples, with how
    many of its stacks: (label, hits, stacks); None with no such line."""
    stacks = [s.stack.main.frames for _, s in samples_of(bundle, pid) if s.stack and s.stack.main]
    found = most_common_line(stacks)
    return (*found, len(stacks)) if found else None


def above_worker_loop(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """The frames a DataLoader worker's `_worker_loop` called into (innermost first)."""
    loop = next((i for i, f in enumerate(frames) if f.name == "_worker_loop"), len(frames))
    return frames[:loop]


def chain(frames, depth: int = 6) -> str:
    """The innermost `depth` frames, innermost first, always reaching the job's own innermost line:
    when it lies deeper, the frames between are counted and that line ends the excerpt."""
    frames = tuple(frames)
    own = next((i for i, f in enumerate(frames) if f.is_job_code), None)
    if own is None or own < depth:
        return " <- ".join(f.label for f in frames[:depth])
    if own <= depth:    # one frame more: cheaper than saying one was left out
        return " <- ".join(f.label for f in frames[:own + 1])
    head = [f.label for f in frames[:depth - 1]]
    return " <- ".join([*head, f"... ({own - len(head)} frames)", frames[own].label])


def frames_line(bundle: Bundle, pid: int, depth: int = 6) -> str | None:
    sample = bundle.last.sample_of(pid)
    main = sample.stack.main if sample and sample.stack else None
    if main is None:
        return None
    return chain(main.frames, depth)


def cpu_use(bundle: Bundle, pid: int) -> tuple[float, float] | None:
    """(CPU seconds used, wall seconds) between the first and the last sample with /proc data."""
    points = [(t, s.proc.cpu_s) for t, s in samples_of(bundle, pid) if s.alive and s.proc is not None]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return points[-1][1] - points[0][1], points[-1][0] - points[0][0]


@dataclass(frozen=True)
class FileRead:
    """How a process moved through one file it held open for reading during the capture."""

    path: str
    size: int | None
    first_pos: int
    last_pos: int
    read_bytes: int            # forward movement summed over sample pairs
    seconds: float             # the time those pairs span
    backward_seeks: int        # times the offset went back

    @property
    def bytes_per_s(self) -> float | None:
        return self.read_bytes / self.seconds if self.seconds > 0 else None


def file_reads(bundle: Bundle, pid: int) -> list[FileRead]:
    """Every regular file `pid` held open for reading, with its offsets across the samples.

    The rate counts forward movement between consecutive samples in which the same fd named
    the same file, so it is the bytes the process read from disk (compressed bytes for a
    compressed file), per second of the time it held the file.
    """
    return list(_kept(bundle, ("reads", pid), lambda: _file_reads(bundle, pid)))


def _file_reads(bundle: Bundle, pid: int) -> list[FileRead]:
    series: dict[tuple[int, str], list[tuple[float, int, int | None]]] = {}
    for time, sample in samples_of(bundle, pid):
        if not sample.alive or sample.proc is None:
            continue
        for f in sample.proc.open_files:
            if f.mode == "r":
                series.setdefault((f.fd, f.path), []).append((time, f.pos, f.size))
    reads = []
    for (_, path), points in series.items():
        forward = seconds = back = 0
        for (t0, p0, _), (t1, p1, _) in zip(points, points[1:]):
            seconds += t1 - t0
            if p1 >= p0:
                forward += p1 - p0
            else:
                back += 1
                forward += p1        # it went back, then read this far again
        reads.append(FileRead(path, points[-1][2], points[0][1], points[-1][1], forward, seconds, back))
    return sorted(reads, key=lambda r: (-r.read_bytes, r.path))


def file_read_line(read: FileRead) -> str:
    size = f" ({mb(read.size)})" if read.size else ""
    speed = read.bytes_per_s
    if speed is None:
        return f"{read.path}{size} open at offset {mb(read.last_pos)}"
    if not read.read_bytes and not read.backward_seeks:
        done = f" ({100 * read.last_pos / read.size:.0f}%)" if read.size else ""
        return f"{read.path}{size}: offset {mb(read.last_pos)}{done}, not moving for {read.seconds:.1f} s"
    done = f", {100 * read.last_pos / read.size:.0f}% of the file" if read.size else ""
    if not read.backward_seeks:
        return (f"{read.path}{size}: offset {mb(read.first_pos)} -> {mb(read.last_pos)} in {read.seconds:.1f} s "
                f"= {rate(speed)}{done}")
    # The offset went back (a seek, a file read again): first -> last is no distance read; the
    # forward movement is.
    times = f"{read.backward_seeks} time{'s' if read.backward_seeks != 1 else ''}"
    return (f"{read.path}{size}: read {mb(read.read_bytes)} in {read.seconds:.1f} s = {rate(speed)}; the offset "
            f"went back {times} (from {mb(read.first_pos)}, now {mb(read.last_pos)}{done})")


def kernel_wait(bundle: Bundle, sample: ProcSample) -> str:
    """"state S, wchan futex_do_wait, syscall 202 (futex)" for one sample."""
    proc = sample.proc
    if proc is None:
        return "no /proc data"
    parts = [f"state {proc.state}"]
    if proc.wchan:
        parts.append(f"wchan {proc.wchan}")
    if proc.syscall:
        name = proc.syscall_name or syscall_name(bundle.host.arch, proc.syscall)
        parts.append(f"syscall {proc.syscall}" + (f" ({name})" if name else ""))
    if proc.syscall_path:
        parts.append(f"opening {proc.syscall_path}")
    elif proc.syscall_path_error:
        parts.append(f"the path it opens could not be read: {proc.syscall_path_error}")
    return ", ".join(parts)


def in_futex(sample: ProcSample) -> bool:
    proc = sample.proc
    return proc is not None and proc.in_futex
