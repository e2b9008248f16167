"""Each process over time: its state at every sample, whether it moves, and for how long it has not.

Whether a rank *progressed* between two samples is decided from the job's own loop
(`analyze/progress.py`); CPU time and bytes here are hints that it is busy, never proof
that it stepped: NCCL moves its bytes outside the host's syscalls, and a small model's
all-reduce moves a few bytes a step.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Callable

from hangdoc.analyze.classify import (NESTED_EXPRESSION, SOCKET_READ, WORK_WAIT, Reading, classify_rank, classify_worker,
                                      is_gpu_sync, parked_in, place, signature)
from hangdoc.analyze.gpu import judged_by_gpu
from hangdoc.model.gpu import gpu_activity
from hangdoc.model import Bundle, GpuActivity, LoopMark, ProcSample, RankState, Role, Snapshot, ThreadCounters

# Bytes a process may move between samples without it counting as progress (store pings).
IO_NOISE_BYTES = 4096
CPU_NOISE_S = 0.02
WAKEUPS_PER_DUMP = 2     # voluntary context switches one blocking py-spy dump adds to a parked thread
# Wake-ups of a main thread parked in a socket read, beyond hangdoc's own stack reads, between two
# samples that show data arriving: each arrival ends the read, and the code around it reads again.
RECV_WAKEUPS = 3


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
    # (fd, path, offset) of each file it holds open for reading; None where the round's read of
    # the process was a light one (no descriptors read).
    reads: tuple[tuple[int, str, int], ...] | None = None
    # The sizes of those files, in their order, and the bytes the process had read in all (rchar: every
    # read, a file's bytes read again after a rewind included); None where not read.
    sizes: tuple[int | None, ...] | None = None
    rchar: int | None = None
    gpu: GpuActivity | None = None         # what its GPU did at this sample (a rank's, where read)
    # Its loop mark holds a counter of the loop: an integer seen to move, often enough (a rank's
    # `_CounterWatch`); standing still, such counters are the loop's word that it did not step.
    counts: bool = False
    # Its main thread sleeps in a socket read (Python's socket or ssl, a native recv, the kernel's
    # wait channel): bytes that arrive there are counted by no /proc/PID/io field (see `receiving`).
    socket_read: bool = False
    # Answers about this point worked out once (did it step since an earlier point, where does
    # its trailing run start): a live watch asks the same questions of the same points every round.
    memo: dict = field(default_factory=dict, compare=False, repr=False)


_NO_READING = Reading(RankState.UNKNOWN, None, None)


def _point(time: float, sample: ProcSample | None, worker: bool, reading: Reading | None = None,
           gpu: GpuActivity | None = None, sig: tuple | None = None) -> Point:
    reading = reading or (classify_worker(sample) if worker else classify_rank(sample))
    proc = sample.proc if sample else None
    main = sample.stack.main if sample and sample.stack else None
    return Point(time, reading, signature(sample) if sig is None else sig, main=proc.main_thread if proc else None,
                 loop=main.loop if main else None, gpu=gpu, socket_read=parked_in(sample) == SOCKET_READ,
                 **_proc_fields(proc))


def _proc_fields(proc) -> dict:
    """A point's readings of /proc: its CPU, its bytes (all, and read), and the files it holds open for
    reading with their offsets and sizes (a full read only)."""
    io = proc.io if proc is not None else None
    files = [f for f in proc.open_files if f.mode == "r"] if proc is not None and proc.full else None
    return dict(cpu_s=proc.cpu_s if proc is not None else None,
                io_bytes=io.rchar + io.wchar if io is not None else None,
                rchar=io.rchar if io is not None else None,
                reads=tuple((f.fd, f.path, f.pos) for f in files) if files is not None else None,
                sizes=tuple(f.size for f in files) if files is not None else None)


def _waits_on_work(sample: ProcSample) -> bool:
    """The stack stands at the job's own line that holds a collective's Work: a spin on it. A frame
    that holds a Work while it calls on (a forward run while the gradients are all-reduced, overlap
    as intended) computes, and is read as computing."""
    main = sample.stack.main if sample.stack is not None else None
    if main is None or main.loop is None or not main.loop.waits_on_work:
        return False
    frames = signature(sample)
    holder = main.loop.frames[-1]
    return bool(frames) and frames[0].is_job_code and frames[0].line == holder.line \
        and frames[0].name.rsplit(".", 1)[-1] == holder.function.rsplit(".", 1)[-1]


def read_forward(a: Point, b: Point) -> int:
    """Bytes the process's read offsets moved forward between two points, over the files it held
    open at both (a file read again from its start moves nothing forward); 0 where either point's
    descriptors were not read."""
    if a.reads is None or b.reads is None:
        return 0
    before = {(fd, path): pos for fd, path, pos in a.reads}
    return sum(pos - before[fd, path] for fd, path, pos in b.reads
               if (fd, path) in before and pos > before[fd, path])


def moved(a: Point, b: Point) -> bool:
    """Did the process do anything between two points (CPU, bytes, or data arriving on the socket
    its main thread reads)?"""
    cpu = a.cpu_s is not None and b.cpu_s is not None and b.cpu_s - a.cpu_s > CPU_NOISE_S
    return cpu or moved_bytes(a, b) or receiving(a, b)


def receiving(a: Point, b: Point) -> bool:
    """Data arrived between two points on the socket the process's main thread sleeps reading: a
    rank downloading its dataset while the others wait at a barrier, a worker fetching a shard
    from an object store. /proc/PID/io counts read() and write(), not the recv() Python's sockets
    use, and a slow download costs next to no CPU; but a thread blocked in a socket read wakes only
    when data comes (or a dump reads it), so its wake-ups count the arrivals. One blocked for good
    on a silent peer wakes only for hangdoc's reads."""
    return (a.socket_read and b.socket_read and a.main is not None and b.main is not None
            and b.main.voluntary_switches - a.main.voluntary_switches > WAKEUPS_PER_DUMP + RECV_WAKEUPS)


def moved_bytes(a: Point, b: Point) -> bool:
    return a.io_bytes is not None and b.io_bytes is not None and b.io_bytes - a.io_bytes > IO_NOISE_BYTES


class Peers:
    """The rank timelines of one bundle, shared by each of them: what reading one rank needs of the
    others (the job's pauses), worked out once a round under `memo`."""

    def __init__(self):
        self.lines: list[Timeline] = []
        self.memo: dict = {}


@dataclass(frozen=True)
class Timeline:
    pid: int
    points: tuple[Point, ...]
    peers: Peers | None = field(default=None, compare=False, repr=False)   # a rank's: the job's ranks

    @property
    def last(self) -> Point:
        return self.points[-1]

    def state_since(self) -> float:
        """When the process entered its current state (same state and detail), as far as we saw."""
        return self.run_start("state", lambda a, b: (a.reading.state, a.reading.detail)
                              == (b.reading.state, b.reading.detail))

    def unmoved_since(self) -> float:
        """Start of the trailing run with the same frames and no CPU or bytes moved."""
        return self.run_start("unmoved", lambda a, b: a.sig == b.sig and not moved(a, b))

    def run_start(self, key: str, joins: Callable[[Point, Point], bool]) -> float:
        """When the trailing run began in which each point `joins` the one before it.

        Each point remembers where its run began (under `key`), so a timeline one point longer
        than last round's costs one comparison, not a walk over its whole history."""
        points = self.points
        i = len(points) - 1
        while i > 0 and key not in points[i].memo:
            i -= 1
        points[i].memo.setdefault(key, points[i].time)
        for prev, point in zip(points[i:], points[i + 1:]):
            point.memo[key] = prev.memo[key] if joins(prev, point) else point.time
        return max(points[-1].memo[key], points[0].time)


# A process that uses less than this share of one CPU, and moves fewer bytes a second, over the
# whole watch is asleep: polling a queue with a timeout, a stats thread's tick, a blocking stack
# read's wake-ups. A computing rank or a decompressing worker uses most of a CPU.
STILL_CPU_SHARE = 0.05
STILL_BYTES_PER_S = 16384


def still(points: Sequence[Point]) -> bool:
    """Did the process do nothing worth the name over its points: under STILL_CPU_SHARE of a CPU,
    under STILL_BYTES_PER_S, no data arriving on a socket it reads? CPU and bytes are judged from
    the first and the last point (a share, not a per-round delta: the kernel counts CPU in 10 ms
    ticks). False with fewer than two points."""
    if len(points) < 2:
        return False
    a, b = points[0], points[-1]
    span = b.time - a.time
    if span <= 0 or a.cpu_s is None or b.cpu_s is None:
        return False
    if b.cpu_s - a.cpu_s > STILL_CPU_SHARE * span:
        return False
    if any(receiving(p, q) for p, q in zip(points, points[1:])):
        return False
    return a.io_bytes is None or b.io_bytes is None or b.io_bytes - a.io_bytes <= STILL_BYTES_PER_S * span


def raw_points(bundle: Bundle, pid: int) -> list[Point]:
    """CPU and bytes of a process without a timeline (a rank's child), sample by sample."""
    points = []
    for snapshot in bundle.samples:
        sample = snapshot.sample_of(pid)
        proc = sample.proc if sample is not None else None
        if proc is not None and sample.alive:
            points.append(Point(snapshot.time, _NO_READING, (), proc.cpu_s,
                                proc.io.rchar + proc.io.wchar if proc.io else None))
    return points


# A counter of the loop moves at least once in this many reads of it: a rank's integer locals that
# never move (`rank`, `world_size`, a batch size) or hardly (`epoch`) are not its steps' counters.
COUNTER_READS_PER_MOVE = 20


class _CounterWatch:
    """Which of a rank's integer locals count its steps, as its samples show them: those seen to
    move, at least once every COUNTER_READS_PER_MOVE reads. Integers that never move (`rank`,
    `world_size`, a batch size) or hardly (`epoch`) standing still do not mean the loop stood (a
    loop whose step is kept on an object): there the other witnesses speak."""

    def __init__(self):
        self._last: dict[tuple[str, str], int] = {}
        self._reads: dict[tuple[str, str], int] = {}
        self._moves: dict[tuple[str, str], int] = {}

    def counts(self, mark: LoopMark) -> bool:
        """Whether `mark` holds a counter of the loop (and count its reads)."""
        now = {(f.function, name): value for f in mark.frames for name, value in f.counters}
        for key, value in now.items():
            if key in self._last:
                self._reads[key] = self._reads.get(key, 0) + 1
                if self._last[key] != value:
                    self._moves[key] = self._moves.get(key, 0) + 1
        self._last = now
        return any(0 < self._moves.get(k, 0) and self._reads.get(k, 0) <= COUNTER_READS_PER_MOVE * self._moves[k]
                   for k in now)


class _Callers:
    """py-spy shows a generator expression resumed from C (`all(w.is_completed() for w in work)`)
    alone, with none of the frames that called it (seen on a real job, in a function and at module
    level). It runs on its caller's line: the rank's last stack whose innermost frame stood at that
    line (the spin line's own frame, caught at another sample) is its caller's, and completes it, so
    that both of the line's samples are one place and one region. Until one is seen, `place` folds
    it alone."""

    KEPT = 64            # lines remembered per rank

    def __init__(self):
        self._at: dict[tuple[str, int], tuple] = {}
        self._pending: set[tuple[str, int]] = set()   # lines caught lone, their own frame not yet seen

    def completes_earlier(self, sig: tuple) -> bool:
        """`sig` is the first stack seen at a line whose generator expression was caught alone
        before: those samples can now be completed with it (`complete` is asked next)."""
        return bool(sig) and not _lone(sig) and (sig[0].filename, sig[0].line) in self._pending

    def complete(self, sig: tuple) -> tuple:
        if not sig:
            return sig
        top = sig[0]
        if _lone(sig):
            caller = self._at.get((top.filename, top.line))
            if caller:
                return (top, *caller)
            if len(self._pending) < self.KEPT:
                self._pending.add((top.filename, top.line))
            return sig
        if top.is_job_code:
            if len(self._at) >= self.KEPT:
                self._at.clear()
            self._at[top.filename, top.line] = sig
            self._pending.discard((top.filename, top.line))
        return sig


def _lone(sig: tuple) -> bool:
    """A generator expression of the job's code alone on the stack, its callers not shown."""
    return len(sig) == 1 and sig[0].is_job_code and bool(NESTED_EXPRESSION.search(sig[0].name))


def timelines(bundle: Bundle) -> dict[int, Timeline]:
    """A timeline for every rank and worker of the bundle, over all its samples."""
    return LiveTimelines().of(bundle)


class LiveTimelines:
    """Timelines kept up to date as a watch samples: each new snapshot adds its points and the
    snapshots the watch dropped from the front take theirs along, so a round costs one sample,
    not the whole history. `of(bundle)` is always what the whole history gives."""

    def __init__(self):
        self._series: dict[int, deque[Point]] = {}
        self._last: float | None = None
        # What a native probe found a rank waiting in, by the Python stack it stood at: the same
        # stack read later without native frames is the same wait.
        self._learned: dict[int, dict[tuple, Reading]] = {}
        self._counters: dict[int, _CounterWatch] = {}
        self._callers: dict[int, _Callers] = {}

    def of(self, bundle: Bundle) -> dict[int, Timeline]:
        roles = {p.pid: p.role for p in bundle.job.processes}
        first = bundle.samples[0].time if bundle.samples else None
        for series in self._series.values():
            while series and first is not None and series[0].time < first:
                series.popleft()
        fresh = [s for s in bundle.samples if self._last is None or s.time > self._last]
        for snapshot in fresh:
            self._add(snapshot, roles)
        if bundle.samples:
            self._last = bundle.samples[-1].time
        peers = Peers()
        lines = {pid: Timeline(pid, tuple(series), peers if roles[pid] is Role.RANK else None)
                 for pid, series in self._series.items() if series and roles.get(pid) in (Role.RANK, Role.WORKER)}
        peers.lines.extend(line for line in lines.values() if line.peers is peers)
        return lines

    def _add(self, snapshot: Snapshot, roles: dict[int, Role]) -> None:
        for pid, role in roles.items():
            if role not in (Role.RANK, Role.WORKER):
                continue
            sample = snapshot.sample_of(pid)
            if sample is None:
                continue   # not yet born, or not sampled this time
            series = self._series.setdefault(pid, deque())
            if sample.stack is None and sample.alive and series:
                # stacks skipped this round (a worker sampled less often): carry the reading on
                prev = series[-1]
                proc = sample.proc
                series.append(Point(snapshot.time, prev.reading, prev.sig, loop=prev.loop,
                                    main=proc.main_thread if proc else None, fresh=False,
                                    gpu=gpu_activity(snapshot.gpu.device_of(pid))
                                    if role is Role.RANK and snapshot.gpu.available else None,
                                    **_proc_fields(proc)))
                continue
            if role is Role.WORKER:
                series.append(_point(snapshot.time, sample, True))
                continue
            gpu = gpu_activity(snapshot.gpu.device_of(pid)) if snapshot.gpu.available else None
            callers = self._callers.setdefault(pid, _Callers())
            raw = signature(sample)
            earlier = callers.completes_earlier(raw)
            sig = callers.complete(raw)
            if earlier:
                self._complete_earlier(pid, sig)
            point = _point(snapshot.time, sample, False, self._rank_reading(pid, sample, snapshot, sig), gpu, sig)
            if point.loop is not None:
                point = replace(point, counts=self._counters.setdefault(pid, _CounterWatch()).counts(point.loop))
            series.append(point)

    def waits_at(self, pid: int, frames: tuple) -> bool:
        """A native read of the rank at this place found it waiting on the others."""
        return place(frames) in self._learned.get(pid, {})

    def _complete_earlier(self, pid: int, sig: tuple) -> None:
        """The line's own frame, seen for the first time: the rank's earlier samples that caught
        the line's generator expression alone are completed with it (one place, as from then on),
        and a wait learned at the lone shape is the line's."""
        series = self._series.get(pid)
        top = sig[0]
        lone, first = None, None
        for i, point in enumerate(series or ()):
            if _lone(point.sig) and (point.sig[0].filename, point.sig[0].line) == (top.filename, top.line):
                lone = lone or place(point.sig)
                series[i] = replace(point, sig=(point.sig[0], *sig), memo={})
                first = i if first is None else first
        if first is None:
            return
        for i in range(first, len(series)):
            series[i].memo.clear()
        learned = self._learned.get(pid, {})
        if lone in learned:
            self._learn(pid, place(sig), learned[lone])

    def _learn(self, pid: int, where: tuple, reading: Reading) -> Reading:
        """The rank waits at `where`: so it did at its earlier samples there, read then as computing
        (a spin line's own frame caught before its generator expression showed the Work, a stack
        read before the native probe). They are read again, and what was worked out from them after
        the first is worked out anew: a wait under way since the first sample is then seen as one.
        Returns the place's reading: one name for one wait, the first it was read by (a new name
        would read as a new wait, begun then)."""
        known = self._learned.setdefault(pid, {})
        if where in known:
            return known[where]
        known[where] = reading
        series = self._series.get(pid)
        if not series:
            return reading
        first = None
        for i, point in enumerate(series):
            # A round with no stack carried its reading on: it is read again with the point it carried.
            if point.reading.state == RankState.COMPUTE and point.sig and place(point.sig) == where:
                again = judged_by_gpu(reading, point.gpu) if point.gpu is not None and is_gpu_sync(reading.detail) \
                    else reading
                series[i] = replace(point, reading=again, memo={})
                first = i if first is None else first
        if first is not None:
            for i in range(first, len(series)):
                series[i].memo.clear()
        return reading

    def _rank_reading(self, pid: int, sample: ProcSample, snapshot: Snapshot, sig: tuple) -> Reading:
        """The rank's reading: what its frames say, a wait a native probe of the same stack found,
        and a sync on its GPU stream judged by what its GPU does."""
        reading = classify_rank(sample)
        learned = self._learned.get(pid)
        if sample.stack is not None and sample.stack.probe and reading.state == RankState.COLLECTIVE:
            reading = self._learn(pid, place(sig), reading)
        elif reading.state in (RankState.COMPUTE, RankState.IDLE) and _waits_on_work(sample):
            # Its own line holds a collective's Work and waits on it (NCCL's shape, in the job's
            # code): a wait on the others there, whichever frame of the line a sample catches (under
            # the name a native read of the place gave it first, if one did). A native probe's read
            # counts too: its Python frames hold the Work as a plain read's do.
            reading = self._learn(pid, place(sig), Reading(RankState.COLLECTIVE, WORK_WAIT, reading.frame))
        elif learned and reading.state == RankState.COMPUTE:
            reading = learned.get(place(sig), reading)
        if snapshot.gpu.available and is_gpu_sync(reading.detail):
            reading = judged_by_gpu(reading, gpu_activity(snapshot.gpu.device_of(pid)))
        return reading
