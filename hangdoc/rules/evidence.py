"""Evidence lines shared by rules: a rank's frames, its workers, its GPU, its files, its logs.

Everything here reads the bundle only (samples, job, logs), so rules stay pure.
"""
from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass

from hangdoc.analyze.classify import is_gpu_sync, own_frame, signature
from hangdoc.analyze.diagnose import RankView
from hangdoc.analyze.gpu import gpu_activity
from hangdoc.analyze.logs import killed_workers
from hangdoc.analyze.logs import line_rank as log_rank  # noqa: F401  (re-exported for rules)
from hangdoc.analyze.workers import worker_fates
from hangdoc.base.syscalls import syscall_name
from hangdoc.model import Bundle, Frame, GpuActivity, LogTail, ProcSample
from hangdoc.base.words import mb, rank_set
from hangdoc.rules.clock import blocked_for, on_clock, worker_doing  # noqa: F401  (worker_doing re-exported)

COMPRESSED_SUFFIXES = {".bz2": "bz2", ".tbz2": "bz2", ".tbz": "bz2", ".gz": "gzip", ".tgz": "gzip",
                       ".xz": "xz", ".lzma": "xz", ".txz": "xz", ".zst": "zstd", ".zstd": "zstd"}
DECOMPRESS_FILES = {"bz2.py": "bz2", "lzma.py": "xz", "gzip.py": "gzip", "zlib": "zlib",
                    "_compression.py": None, "zstandard": "zstd", "zstd": "zstd"}
_PREFIX = re.compile(r"^\[(?:default)?rank\d+\]:\s?")


def frames_line(bundle: Bundle, pid: int, depth: int = 6) -> str | None:
    sample = bundle.last.sample_of(pid)
    main = sample.stack.main if sample and sample.stack else None
    if main is None:
        return None
    return chain(main.frames, depth)


def rank_line(ctx, view: RankView) -> str:
    frame = view.reading.frame.label if view.reading.frame else "no stack"
    detail = f" in {view.reading.detail}" if view.reading.detail else ""
    held = ctx.diagnosis.decided_at - on_clock(ctx, view.state_since)
    return (f"rank {view.info.rank} (pid {view.info.node_pid}): {view.reading.state}{detail} "
            f"for {held:.0f} s at {frame}")


def waiting_line(ctx, view: RankView) -> str | None:
    """The job's loop and the kernel's view of a waiting rank since it stopped stepping."""
    since = view.blocked_since
    points = [(t, s) for t, s in samples_of(ctx.bundle, view.info.pid) if since is not None and t >= since]
    if len(points) < 2:
        return None
    (_, first), (_, last) = points[0], points[-1]
    loop = last.stack.main.loop if last.stack and last.stack.main else None
    counters = [f"{name}={value}" for frame in (loop.frames if loop else ()) for name, value in frame.counters]
    quiet = ctx.diagnosis.decided_at - on_clock(ctx, since)
    parts = [f"rank {view.info.rank} has not stepped for {quiet:.0f} s"
             + (f" (its loop stands at {', '.join(counters[:4])})" if counters else "")]
    a = first.proc.main_thread if first.proc else None
    b = last.proc.main_thread if last.proc else None
    if not counters and (a is None or b is None):
        return None    # an older bundle: nothing beyond what the straggler line says
    if a is not None and b is not None:
        sleeps = b.voluntary_switches - a.voluntary_switches
        slept = ("never went to sleep" if sleeps <= 0 else
                 f"went to sleep {sleeps} time{'s' if sleeps != 1 else ''} (each stack read that pauses it adds 2)")
        parts.append(f"its main thread used {b.cpu_s - a.cpu_s:.2f} s of CPU and {slept}")
    return "; ".join(parts)


def worker_lines(view: RankView, ctx=None) -> list[str]:
    """The rank's live workers, one line each; the exited ones (earlier epochs' and loaders', or
    dead: worker-died names those) in one count."""
    lines = []
    for worker, reading, alive in view.workers:
        if not alive:
            continue
        where = reading.frame.label if reading.frame else "-"
        index = worker.worker_index if worker.worker_index is not None else "?"
        held = blocked_for(ctx, worker.pid) if ctx is not None else None
        doing = f"blocked {reading.detail} for {held:.0f} s" if held is not None else reading.state
        lines.append(f"  worker {index} (pid {worker.node_pid}): {doing} at {where}")
    gone = sum(not alive for _, _, alive in view.workers)
    if gone:
        lines.append(f"  {gone} more worker(s) exited")
    return lines


# --- numbers -------------------------------------------------------------------------


def rate(n: float) -> str:
    return f"{n / 1e6:.1f} MB/s" if n >= 1e5 else f"{n / 1e3:.0f} kB/s"


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


# --- samples of one process -------------------------------------------------------------


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


@dataclass(frozen=True)
class Habit:
    """How busy a worker was and where, over the samples that saw it."""

    busy: float                 # the share of a core it used
    line: str | None            # the job's own line it was found at most often
    text: str                   # "worker 0 (pid N): 83% of a core busy, mostly at f (file.py:12) (9 of 12 stacks)"


def worker_habit(bundle: Bundle, worker) -> Habit | None:
    """The worker's Habit; None when it was not seen twice."""
    used = cpu_use(bundle, worker.pid)
    if not used or used[1] <= 0:
        return None
    at = usual_line(bundle, worker.pid)
    where = f", mostly at {at[0]} ({at[1]} of {at[2]} stacks)" if at else ""
    busy = used[0] / used[1]
    return Habit(busy, at[0] if at else None, f"{worker_name(worker)}: {100 * busy:.0f}% of a core busy{where}")


def member_decode_frames(bundle: Bundle, pid: int, recent: int = 8) -> tuple[Frame, ...] | None:
    """A worker's recent frames that show a decoder reading straight from a tar member."""
    return recent_worker_frames(bundle, pid, member_decode, recent)


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


def cpu_use(bundle: Bundle, pid: int) -> tuple[float, float] | None:
    """(CPU seconds used, wall seconds) between the first and the last sample with /proc data."""
    points = [(t, s.proc.cpu_s) for t, s in samples_of(bundle, pid) if s.alive and s.proc is not None]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return points[-1][1] - points[0][1], points[-1][0] - points[0][0]


def compression_of_path(path: str) -> str | None:
    for suffix, kind in COMPRESSED_SUFFIXES.items():
        if path.endswith(suffix):
            return kind
    return None


def compression_of_frames(frames) -> str | None:
    """"bz2", "gzip", "xz", "zlib", "zstd", or "" (only `_compression` / `decompress`) from a stack; None."""
    generic = False
    for frame in frames:
        for needle, kind in DECOMPRESS_FILES.items():
            if needle in frame.filename:
                if kind:
                    return kind
                generic = True
        generic = generic or "decompress" in frame.name.lower()
    return "" if generic else None


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


# --- logs ------------------------------------------------------------------------------


def strip_rank(line: str) -> str:
    """The line without torchrun's `[rankN]:` prefix."""
    return _PREFIX.sub("", line, count=1).rstrip()


def find_lines(logs: tuple[LogTail, ...], *needles: str) -> list[tuple[LogTail, int]]:
    """(tail, index) of every log line holding one of `needles`."""
    return [(tail, i) for tail in logs for i, line in enumerate(tail.lines)
            if any(n in line for n in needles)]


def traceback_frames(lines: tuple[str, ...], end: int, limit: int = 4) -> list[str]:
    """The last `limit` `File "...", line N, in f` entries (with their source line) above `end`."""
    frames: list[str] = []
    i = end - 1
    while i >= 0 and len(frames) < limit:
        text = strip_rank(lines[i]).strip()
        if text.startswith("Traceback (most recent call last)") or text.startswith("Original Traceback"):
            break
        if text.startswith('File "'):
            source = strip_rank(lines[i + 1]).strip() if i + 1 < end else ""
            where = _short_file_line(text)
            frames.append(f"{where}: {source}" if source and not source.startswith(("^", "~")) else where)
        i -= 1
    return list(reversed(frames))


_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+), in (.+)$')


def _short_file_line(text: str) -> str:
    m = _FILE_LINE.match(text)
    if not m:
        return text
    path, line, func = m.groups()
    parts = path.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else path
    return f"{func} ({short}:{line})"


# --- what a DataLoader worker's stack says ----------------------------------------------

_TAR_MEMBER_READS = ("_FileInFile.", "ExFileObject.", "_Stream.")
_DECODERS = ("wave.py", "aifc.py", "sunau.py", "soundfile", "torchaudio", "librosa", "audioread",
             "scipy/io/wavfile", "av/", "PIL/", "cv2")


def is_decoder_library(frame: Frame) -> bool:
    return any(p in frame.filename for p in _DECODERS)


def is_decoder(frame: Frame) -> bool:
    return "tarfile.py" not in frame.filename and (
        any(p in frame.filename for p in _DECODERS) or "decode" in frame.name.lower())


def member_decode(frames) -> tuple[Frame, Frame] | None:
    """(decoder frame, tar member read frame) when a decoder reads straight from a tar member.

    `frames` innermost first: the first frame outside tarfile.py above (called before) the
    member's read must be a decoder; a dataset function that reads the bytes and decodes them
    afterwards never has the decoder on the stack during the read.
    """
    frames = tuple(frames)
    for i, frame in enumerate(frames):
        if "tarfile.py" in frame.filename and frame.name.startswith(_TAR_MEMBER_READS):
            caller = next((f for f in frames[i + 1:] if "tarfile.py" not in f.filename), None)
            if caller is not None and is_decoder(caller):
                return caller, frame
            return None
    return None


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


def worker_name(worker) -> str:
    index = worker.worker_index if worker.worker_index is not None else "?"
    return f"worker {index} (pid {worker.node_pid})"


@dataclass(frozen=True)
class DeadWorker:
    """A DataLoader worker that died: from the log line PyTorch prints, its exit record, or seen
    alive then gone alone while its rank waits for data (hangdoc/analyze/workers.py decides)."""

    pid: int
    rank: int | None
    how: str                       # "Segmentation fault", "Killed", "exited unexpectedly", "vanished"
    log: str | None                # the log line that says so, without torchrun's prefix
    info: object | None            # its ProcessInfo when the capture saw it alive
    why: str | None = None         # the sign that decided it, when it was not the log line


def fates(ctx) -> dict:
    """Rank pid -> RankWorkers: every worker's fate (live, retired, dead), worked out once."""
    return worker_fates(ctx.bundle, ctx.timelines)


def live_workers(ctx, rank_pid: int) -> list:
    """The workers a rank has now (ProcessInfo): the live ones, else its newest generation's."""
    rank = fates(ctx).get(rank_pid)
    return [w.info for w in rank.current] if rank is not None else []


def generation_of(ctx, rank_pid: int, pid: int) -> list:
    """The workers forked together with `pid` (itself included), as ProcessInfo; the rank's
    current workers when `pid` is not one the capture followed."""
    rank = fates(ctx).get(rank_pid)
    if rank is None:
        return []
    own = [w.info for w in rank.workers if w.pid == pid]
    if not own:
        return [w.info for w in rank.current]
    return own + [w.info for w in rank.siblings(pid)]


def dead_workers(ctx) -> list[DeadWorker]:
    """Workers killed (log lines, exit records), or gone alone while their rank waits for data."""
    bundle, d = ctx.bundle, ctx.diagnosis
    dead = {}
    for rank_pid, rank in fates(ctx).items():
        owner = bundle.job.info(rank_pid)
        for w in rank.dead:
            dead[w.pid] = DeadWorker(w.pid, owner.rank if owner else w.info.rank, w.how or "vanished",
                                     strip_rank(w.log) if w.log else None, w.info, None if w.log else w.why)
    lines = {}
    for tail in bundle.logs:
        for line in tail.lines:
            for pid in killed_workers((LogTail(tail.source, (line,)),)):
                lines.setdefault(pid, line)
    for pid, how in killed_workers(bundle.logs).items():
        if pid in dead:
            continue
        info = bundle.job.info(pid)
        rank = info.rank if info is not None and info.rank is not None else log_rank(lines.get(pid, ""))
        if rank is None and len(d.culprits) == 1:
            rank = d.culprits[0]
        dead[pid] = DeadWorker(pid, rank, how, strip_rank(lines[pid]) if pid in lines else None, info)
    return sorted(dead.values(), key=lambda w: (w.rank is None, w.rank, w.pid))


def gpu_lines(bundle: Bundle, waiting: list[RankView], culprit: RankView) -> list[str]:
    """What the GPUs say of the wait, at the last sample: the waiting ranks' kernels spinning at an
    idle GPU's power (100 % utilisation that is not work), and what the culprit's GPU does."""
    gpu = bundle.last.gpu
    synced = [r for v in waiting if is_gpu_sync(v.reading.detail) for r in v.ranks]
    if not gpu.available:
        return [f"{rank_set(synced)} wait at a sync on the GPU stream ({waiting[0].reading.detail}); no GPU was "
                "read, so whether their GPUs work or wait there is unknown: read as a wait"] if synced else []
    lines = []
    spinning = [(v, d) for v in waiting if (d := gpu.device_of(v.info.pid)) and gpu_activity(d) is GpuActivity.SPIN]
    if spinning:
        ranks = [r for v, _ in spinning for r in v.ranks]
        device = spinning[0][1]
        who = f"the GPU of {rank_set(ranks)} reads" if len(ranks) == 1 else f"the GPUs of {rank_set(ranks)} read"
        lines.append(f"{who} {device.utilization_pct} % at {device.power_w:.0f} W of {device.power_limit_w:.0f} W "
                     "with no memory traffic: a kernel spinning in the wait, not work")
    device = gpu.device_of(culprit.info.pid)
    activity = gpu_activity(device)
    if device is not None and activity is not None:
        doing = {GpuActivity.IDLE: "is idle", GpuActivity.BUSY: "works", GpuActivity.SPIN: "spins too"}[activity]
        power = f", {device.power_w:.0f} W" if device.power_w is not None else ""
        lines.append(f"rank {culprit.info.rank}'s GPU {device.index} {doing} ({device.utilization_pct} %{power})")
    return lines
