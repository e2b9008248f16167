"""One capture of a job: /proc for every process, py-spy stacks in parallel, NVML.

Probes are injected (`Probes`); anything that fails becomes a "could not collect"
line on that process's sample, and the capture goes on.
"""
from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from hangdoc.base.redact import redact_cached
from hangdoc.collect.locks import lock_waits
from hangdoc.collect.pipes import PipeScan, pipe_read_of
from hangdoc.collect.procfs import REUSED, ProcDenied, ProcFS, ProcGone, ProcReused
from hangdoc.collect.resources import cpu_quota, shm_use
from hangdoc.collect.sockets import SocketReader
from hangdoc.collect.stacks import Dump, DumpRequest, StackError, StackReader, dump_many
from hangdoc.model import GpuState, Job, ProcessInfo, ProcSample, Role, Snapshot


def _no_gpu() -> GpuState:
    return GpuState(status="unavailable", reason="GPU sampling was not requested")


@dataclass
class Probes:
    """Everything that touches the live system, with real defaults."""

    procfs: ProcFS = dataclasses.field(default_factory=ProcFS)
    pyspy: StackReader | None = None   # the stack engine: PySpy, or PyStack as the fallback
    gpu: Callable[[], GpuState] = _no_gpu
    clock: Callable[[], float] = time.time
    max_parallel: int | None = None
    sockets: SocketReader = dataclasses.field(default_factory=SocketReader)
    pipes: PipeScan = dataclasses.field(default_factory=PipeScan)


def capture(job: Job, probes: Probes, stack_pids: set[int] | None = None,
            native: bool | set[int] = False, nonblocking: bool | set[int] = False,
            loop_locals: bool = True, light: set[int] = frozenset(),
            steady: set[int] = frozenset(), within: bool = False) -> tuple[Snapshot, Job]:
    """Sample every process of `job`; stacks only for `stack_pids` (all when None).

    `nonblocking` is a flag for every process or the set of pids to read without pausing.
    `native`: a flag for every process, or the set of pids probed natively once (`Stack.probe`).
    With `loop_locals` the ranks' dumps read locals for their LoopMark (see loopmark.py).
    `light`: pids whose /proc read leaves out the kernel wait and the open files (ProcStat.full).
    `steady`: ranks that stepped at the last sample: their sockets' reading may be kept (SocketReader).
    `within`: a second, closer read of a few processes within one round
    (live/watcher.py: `_read_late`): what the round read of the node stands (no GPU, /dev/shm or
    quota reading), and the sockets' reader counts no new capture.
    Returns the snapshot and the job refined by what the stacks told (which children
    are DataLoader workers, and their worker index).
    """
    started = probes.clock()
    t0 = time.monotonic()
    pids = [p.pid for p in job.processes]
    wanted = set(pids) if stack_pids is None else set(stack_pids) & set(pids)
    requests = [
        DumpRequest(pid=p.pid, native=p.pid in native if isinstance(native, set) else native,
                    nonblocking=p.pid in nonblocking if isinstance(nonblocking, set) else nonblocking,
                    worker_locals=p.role is Role.WORKER and p.worker_index is None,
                    loop_locals=loop_locals and p.role is Role.RANK)
        for p in job.processes if p.pid in wanted
    ]
    dumps: dict[int, Dump | StackError] = {}
    # How long each main thread has been asleep, read before any dump of this round wakes it.
    clock = probes.procfs.sched_clock_ms()
    asleep = {pid: probes.procfs.off_cpu_s(pid, clock) for pid in pids} if clock is not None else {}
    requests = [dataclasses.replace(r, nonblocking=True) if _left_asleep(r, asleep.get(r.pid)) else r
                for r in requests]
    with ThreadPoolExecutor(max_workers=2) as side:
        stacks_future = (side.submit(dump_many, probes.pyspy, requests, probes.max_parallel)
                         if probes.pyspy is not None and requests else None)
        gpu_future = None if within else side.submit(probes.gpu)
        links = _links_wanted(job)
        probes.procfs.fd_targets.clear()
        if not within:
            probes.sockets.begin()
        start_times = {p.pid: p.start_time for p in job.processes}
        procs = {pid: _read_proc(probes.procfs, pid, pid not in light, links.get(pid, ()), start_times.get(pid))
                 for pid in pids}
        procs = _with_lock_holders(probes.procfs, procs)
        procs = _with_pipe_writers(probes.procfs, probes.pipes, procs)
        ranks = {p.pid for p in job.processes if p.role is Role.RANK} - light
        procs = _with_rank_reads(probes, procs, ranks, steady)
        if stacks_future is not None:
            dumps = stacks_future.result()
            dumps.update(_read_again(probes, requests, dumps))
            dumps.update(_strangers(probes.procfs, dumps, start_times, procs))
        gpu_state = gpu_future.result() if gpu_future is not None else None

    samples = []
    for pid in pids:
        proc, errors, alive = procs[pid]
        if proc is not None and proc.main_thread is not None and asleep.get(pid) is not None:
            proc = dataclasses.replace(proc, main_thread=dataclasses.replace(proc.main_thread, off_cpu_s=asleep[pid]))
        dump = dumps.get(pid)
        stack = None
        if isinstance(dump, Dump):
            stack = dump.stack
            if isinstance(native, set) and pid in native and stack.native:
                stack = dataclasses.replace(stack, probe=True)
        elif isinstance(dump, StackError):
            if dump.kind == "gone":
                alive = False
            errors = errors + (redact_cached(f"stack: could not collect: {dump}"),)   # py-spy's own words
        samples.append(ProcSample(pid=pid, alive=alive, proc=proc, stack=stack, errors=errors))
    snapshot = Snapshot(time=started, took_s=round(time.monotonic() - t0, 4),
                        processes=tuple(samples),
                        gpu=gpu_state if gpu_state is not None else GpuState(status="unavailable", reason="not read"),
                        shm=None if within else shm_use(job, probes.procfs.root),
                        cpu_quota=None if within else cpu_quota(job, probes.procfs.root))
    return snapshot, refine_job(job, dumps)


def _read_again(probes: Probes, requests: list[DumpRequest], dumps: dict[int, Dump | StackError]
                ) -> dict[int, Dump]:
    """Workers whose index is still unknown and whose read stopped short of multiprocessing's
    `BaseProcess.run` (an engine that failed on part of the interpreter's memory), read once more in
    the same capture: a single snapshot (`watch --once`) has no later round to learn the worker's
    index from. The better read of the two is kept. A child still starting (its read whole, down
    to the parent's start frames) is left to the next round: every worker forked at an epoch's
    start would cost a second dump, and a few milliseconds later it is most often still starting."""
    again = [r for r in requests if r.worker_locals and isinstance(d := dumps.get(r.pid), Dump)
             and d.worker_id is None and not runs_its_target(frames := d.stack.main.frames if d.stack.main else ())
             and not still_starting(frames)]
    if not again:
        return {}
    reread = dump_many(probes.pyspy, again, probes.max_parallel)
    return {pid: d for pid, d in reread.items() if isinstance(d, Dump)
            and (d.worker_id is not None or runs_its_target(d.stack.main.frames if d.stack.main else ()))}


# A main thread off the CPU this long is asleep in the kernel: its stack stands still, so it is read
# without pausing it. A paused read wakes every thread (two voluntary switches each) and restarts
# the scheduler's clock that the next attach dates the wait from (analyze/past.py): a second watch
# of a job hung for minutes would read "waited at least" the seconds since the last watch's read.
ASLEEP_READ_S = 1.0


def _left_asleep(request: DumpRequest, off_cpu_s: float | None) -> bool:
    """Read without pausing: the process's main thread sleeps, and no native frames are asked for
    (py-spy reads those only from a paused process)."""
    return not request.native and off_cpu_s is not None and off_cpu_s >= ASLEEP_READ_S


def _links_wanted(job: Job) -> dict[int, tuple[int, ...] | None]:
    """The descriptors worth naming when not regular files: every one of a rank's other children
    (what a child the rank waits for is blocked on), and a rank's stdin (what a pdb prompt reads)."""
    wanted: dict[int, tuple[int, ...] | None] = {}
    for proc in job.processes:
        if proc.role is Role.CHILD:
            wanted[proc.pid] = None
        elif proc.role is Role.RANK:
            wanted[proc.pid] = (0,)
    return wanted


def _with_lock_holders(procfs: ProcFS, procs: dict):
    """The processes asleep on a file lock get the lock's line of /proc/locks: holder and path."""
    waiting = {pid for pid, (stat, _, _) in procs.items() if stat is not None and stat.in_file_lock}
    if not waiting:
        return procs
    found, error = lock_waits(procfs, waiting)
    for pid in waiting:
        stat, errors, alive = procs[pid]
        if error is not None:
            procs[pid] = (stat, errors + (f"locks: could not collect: {error}",), alive)
        elif pid in found:
            procs[pid] = (dataclasses.replace(stat, locks=found[pid]), errors, alive)
    return procs


def _with_pipe_writers(procfs: ProcFS, scan: PipeScan, procs: dict):
    """The processes asleep reading a pipe get the pipe, and who holds its write end, read over the node once."""
    asleep = [pid for pid, (stat, _, _) in procs.items() if stat is not None and stat.full and stat.in_pipe_read]
    reading = {pid: read for pid in asleep if (read := pipe_read_of(procfs, pid)) is not None}
    if not reading:
        return procs
    try:
        found, unread = scan.writers(procfs, {read.target for read in reading.values()})
    except OSError as exc:
        for pid in reading:
            stat, errors, alive = procs[pid]
            procs[pid] = (stat, errors + (f"pipes: could not collect: {exc.strerror or exc}",), alive)
        return procs
    for pid, read in reading.items():
        stat, errors, alive = procs[pid]
        pipe = dataclasses.replace(read, writers=found[read.target], unread=unread)
        procs[pid] = (dataclasses.replace(stat, pipe_read=pipe), errors, alive)
    return procs


def _with_rank_reads(probes: Probes, procs: dict, ranks: set[int], steady: set[int]):
    """The ranks read in full get their threads' names (what tells NCCL from gloo) and their TCP
    sockets (what names a peer's address, or the store's, as a rank)."""
    procfs = probes.procfs
    for pid in ranks:
        stat, errors, alive = procs.get(pid, (None, (), False))
        if stat is None or not alive:
            continue
        try:
            stat = dataclasses.replace(stat, thread_names=procfs.thread_names(pid))
        except (ProcGone, ProcDenied, OSError):
            pass                     # the names are a hint; the sample stands without them
        try:
            stat = dataclasses.replace(stat, sockets=probes.sockets.read(
                pid, str(procfs.root), pid in steady, procfs.fd_targets.get(pid)))
        except (FileNotFoundError, ProcessLookupError):
            pass                     # gone since its read: the next sample says so
        except OSError as exc:
            errors = errors + (f"sockets: could not collect: {exc.strerror or exc}",)
        procs[pid] = (stat, errors, alive)
    return procs


def _strangers(procfs: ProcFS, dumps: dict[int, Dump | StackError], started: dict[int, float],
               procs: dict) -> dict[int, StackError]:
    """The stacks read of another process than the one found: its pid was reused (read so by /proc
    this round, or started otherwise once the stack was read). The stack is the stranger's, and is
    dropped: a rank that exited is never read as the process that took its pid."""
    out = {}
    for pid, dump in dumps.items():
        if not isinstance(dump, Dump) or not started.get(pid):
            continue
        _, errors, _ = procs.get(pid, (None, (), True))
        if any(REUSED in e for e in errors) or procfs.started_as(pid, started[pid]) is False:
            out[pid] = StackError("gone", f"process {pid} has exited; {REUSED}")
    return out


def _read_proc(procfs: ProcFS, pid: int, full: bool = True, links: tuple[int, ...] | None = (),
               started: float | None = None):
    try:
        stat = procfs.proc_stat(pid, full, links, started or None)
    except ProcReused as exc:
        return None, (f"proc: could not collect: {exc}",), False
    except ProcGone:
        return None, ("proc: could not collect: the process has exited",), False
    except ProcDenied as exc:
        return None, (f"proc: could not collect: {exc}",), True
    except (OSError, ValueError, IndexError) as exc:
        return None, (f"proc: could not collect: {exc}",), True
    return stat, (), stat.state not in ("Z", "X")


def refine_job(job: Job, dumps: dict[int, Dump | StackError]) -> Job:
    """Confirm DataLoader workers from their stacks; a Python child seen running a target of its own
    becomes CHILD. Any other read leaves it a WORKER, to be read again next round: a child still
    starting (its target not yet called), and a read that does not reach multiprocessing's
    `BaseProcess.run` at the bottom of every such child's stack (an engine that failed on part of
    the interpreter's memory), by which a worker would be lost to every later round."""
    changed = False
    infos: list[ProcessInfo] = []
    for info in job.processes:
        dump = dumps.get(info.pid)
        if info.role is Role.WORKER and isinstance(dump, Dump):
            main = dump.stack.main
            frames = main.frames if main else ()
            names = {f.name for f in frames}
            if "_worker_loop" not in names and (runs_its_target(frames) or plain_fork(frames)):
                info = dataclasses.replace(info, role=Role.CHILD)
                changed = True
            elif dump.worker_id is not None and info.worker_index is None:
                info = dataclasses.replace(info, worker_index=dump.worker_id,
                                           num_workers=dump.num_workers)
                changed = True
        infos.append(info)
    return dataclasses.replace(job, processes=tuple(infos)) if changed else job


# Where a multiprocessing child's read ends while it has not yet called its target: a forked one
# holds its parent's frames down to Popen._launch, a spawned one runs spawn's main.
_STARTING = (("multiprocessing/popen_fork.py", "_launch"), ("multiprocessing/popen_forkserver.py", "_launch"),
             ("multiprocessing/spawn.py", "spawn_main"), ("multiprocessing/spawn.py", "_main"))


def still_starting(frames) -> bool:
    """The read is whole and shows a child that has not yet called its target (its start frames
    at the bottom, no `BaseProcess.run` above them)."""
    return not runs_its_target(frames) and any(
        (f.short_filename, f.name.rsplit(".", 1)[-1]) in _STARTING for f in frames)


def plain_fork(frames) -> bool:
    """A whole read (down to a script's `<module>`) with no multiprocessing frame: a child of
    `os.fork()` going on with its parent's code, never a DataLoader worker (every worker runs under
    multiprocessing's `BaseProcess._bootstrap`)."""
    return bool(frames) and frames[-1].name == "<module>" and not any(
        f.short_filename.startswith("multiprocessing/") for f in frames)


def runs_its_target(frames) -> bool:
    """The read reaches multiprocessing's `BaseProcess.run`: the child has called its target, and
    the frames above it say what that is. A forked child holds a copy of its parent's frames down
    to `Popen._launch` until it does; a spawned one imports the job's modules first."""
    return any(f.short_filename == "multiprocessing/process.py" and f.name.rsplit(".", 1)[-1] == "run"
               for f in frames)
