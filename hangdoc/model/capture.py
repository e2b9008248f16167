"""What a capture holds: /proc readings, GPUs, the job, its samples, how its processes ended.

The stacks a sample holds are in `model/stack.py`, the job's own collective record (Flight
Recorder, NCCL RAS) in `model/flight.py`; `Bundle` here gathers them all. Everything here is a
frozen dataclass that round-trips through JSON with `hangdoc.base.serde` (`to_dict` /
`from_dict`). Rules read these objects and nothing else, which is why `hangdoc report` on a
saved bundle says what the live watch said.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from hangdoc.base.parse import cpu_list, to_int
from hangdoc.model.flight import FlightRecord, FrConfig, RasStatus
from hangdoc.model.gpu import GpuDevice, GpuProcess, GpuState  # noqa: F401 - importable from here as before
from hangdoc.model.kernel import FILE_LOCK_WCHANS, PIPE_READ_WCHANS, FileLock, PipeRead
from hangdoc.model.source import SourceFunction
from hangdoc.model.stack import Stack
from hangdoc.model.vocab import Role
from hangdoc.model.wrapper import Wrapper

BUNDLE_SCHEMA = "hangdoc/bundle-v1"
# Linux pids stay below 2**22; a merge of several nodes' bundles renumbers colliding pids to
# node_slot * PID_STRIDE + pid, so `pid % PID_STRIDE` is always the pid on the process's own node.
PID_STRIDE = 10_000_000


# --- /proc -------------------------------------------------------------------


@dataclass(frozen=True)
class OpenFile:
    fd: int
    path: str
    pos: int                       # read/write offset from /proc/PID/fdinfo
    size: int | None = None        # st_size of the file, when it can be stat'ed
    mode: str = "r"                # "r", "w" or "rw" from the fdinfo flags


@dataclass(frozen=True)
class IoCounters:
    rchar: int
    wchar: int
    read_bytes: int
    write_bytes: int
    syscr: int
    syscw: int


@dataclass(frozen=True)
class ThreadCounters:
    """The kernel's view of one thread: CPU time and how often it went to sleep or was preempted."""

    cpu_s: float
    voluntary_switches: int        # /proc/PID/task/TID/status voluntary_ctxt_switches
    involuntary_switches: int
    # Seconds since the thread last ran, as the scheduler says (/proc/PID/task/TID/sched
    # se.exec_start against the reader's own), read before the round's stack dump woke it: at
    # the first sample, how long it had been asleep before hangdoc arrived. None: not read.
    off_cpu_s: float | None = None
    # Seconds it has waited on a run queue, runnable but not running (/proc/PID/task/TID/schedstat's
    # second field): its growth against the clock is how starved of CPU the thread is. None: not read.
    runqueue_s: float | None = None


@dataclass(frozen=True)
class FdLink:
    """A descriptor that is not a regular file, as /proc/PID/fd/N names it: what a child process
    or a rank's stdin is connected to."""

    fd: int
    target: str                    # "pipe:[288509]", "socket:[1234]", "/dev/null", "/tmp/x.fifo"
    kind: str                      # "pipe", "fifo", "socket", "tty", "device" or "other"


@dataclass(frozen=True)
class TcpSocket:
    """A TCP socket a rank holds, as /proc/PID/net/tcp names it by the inode of one of its
    descriptors: what tells a peer's "Connection closed by peer [addr]:port" to be that rank."""

    local: str                     # "127.0.0.1:33674"
    remote: str                    # "127.0.0.1:29500"; "0.0.0.0:0" for a listening socket
    state: str                     # "ESTABLISHED", "LISTEN", "SYN_SENT", ...


@dataclass(frozen=True)
class ProcStat:
    state: str                     # R, S, D, Z, T, ...
    wchan: str | None
    syscall: str | None            # first field of /proc/PID/syscall ("202" is futex on x86_64)
    utime_s: float
    stime_s: float
    rss_bytes: int
    num_threads: int
    io: IoCounters | None
    open_files: tuple[OpenFile, ...] = ()
    main_thread: ThreadCounters | None = None   # the main thread alone (tid == pid)
    # False: a light read (state, CPU, memory, I/O, the main thread's counters) of a process
    # the round did not look at closely; wchan, syscall and open files were not read.
    full: bool = True
    # Descriptors that are not regular files (pipes, FIFOs, sockets, devices): every one of a
    # rank's other children, fd 0 of a rank. Empty where not read.
    fd_links: tuple[FdLink, ...] = ()
    locks: tuple[FileLock, ...] = ()  # the file locks it waits for (/proc/locks), with their holders
    # A rank's threads' distinct names (/proc/PID/task/*/comm): c10d names its own, which tells the
    # backend (pt_nccl_watchdg, pt_gloo_runloop). Empty where not read (workers, light reads, old bundles).
    thread_names: tuple[str, ...] = ()
    # The system call its main thread is in (`syscall`), by name where the collecting host's
    # architecture names it; for a call that opens a file by path (open, openat), the path, read
    # from the process's memory at the call's argument, or why it could not be read. None: not read.
    syscall_name: str | None = None
    syscall_path: str | None = None
    syscall_path_error: str | None = None
    # A rank's TCP sockets (its store connection, gloo's pairs), read from its descriptors and the
    # kernel's tables. Empty where not read (workers, light reads, older bundles).
    sockets: tuple[TcpSocket, ...] = ()
    # The CPUs the process may run on, as /proc/PID/status's Cpus_allowed_list writes them ("0-3,8").
    # None: not read (bundles saved before it was).
    cpus_allowed: str | None = None
    # The pipe or FIFO its main thread sleeps reading, with the processes that hold its write end.
    # None: not in a pipe read, or not read (light reads, older bundles).
    pipe_read: PipeRead | None = None

    @property
    def cpu_s(self) -> float:
        return self.utime_s + self.stime_s

    @property
    def allowed_cpus(self) -> frozenset[int] | None:
        """The CPUs it may run on; None where not read."""
        return cpu_list(self.cpus_allowed) if self.cpus_allowed is not None else None

    @property
    def in_futex(self) -> bool:
        """Asleep in a futex (a lock or condition variable), as the kernel says: futex is syscall
        202 on x86_64 and 98 on aarch64, and its wait functions are named futex_*."""
        return self.syscall in ("202", "98") or "futex" in (self.wchan or "")

    @property
    def in_file_lock(self) -> bool:
        """Asleep on a file lock, as the kernel says (wchan)."""
        return self.wchan in FILE_LOCK_WCHANS

    @property
    def in_pipe_read(self) -> bool:
        """Asleep reading an empty pipe or FIFO, as the kernel says (wchan)."""
        return self.wchan in PIPE_READ_WCHANS


# --- GPUs ---------------------------------------------------------------------


# --- the job and its samples ---------------------------------------------------


@dataclass(frozen=True)
class ProcessInfo:
    """Who a process is in the job; what it is doing lives in ProcSample."""

    pid: int
    ppid: int
    role: Role
    cmdline: tuple[str, ...]
    exe: str | None
    start_time: float              # seconds since the epoch
    env: dict[str, str] = field(default_factory=dict)   # allowlisted and redacted
    rank: int | None = None
    local_rank: int | None = None
    group_rank: int | None = None
    world_size: int | None = None
    rank_pid: int | None = None    # for workers and children: the rank they belong to
    worker_index: int | None = None
    num_workers: int | None = None
    start_method: str | None = None  # "fork" or "spawn" for multiprocessing children
    libs: tuple[str, ...] = ()     # the mapped libraries that matter (libgomp, libnccl, ...)
    host: str | None = None        # its node's hostname, set by a merge (None: the bundle's host)
    # Where its rank was read: "env RANK" (torchrun, srun, mpirun set it), or, where no environment
    # names it (torch.multiprocessing.spawn, Lightning's own launcher), the job's own stack or launcher.
    rank_source: str | None = None
    wrappers: tuple[Wrapper, ...] = ()   # what its launcher ran it under, outermost first: the last its parent

    @property
    def generation(self) -> int:
        """Which start of the ranks it belongs to: torchrun's restart count (0: the first start)."""
        return to_int(self.env.get("TORCHELASTIC_RESTART_COUNT")) or 0

    @property
    def node_pid(self) -> int:
        """The pid on its own node (a merge may renumber `pid`; see PID_STRIDE)."""
        return self.pid % PID_STRIDE


@dataclass(frozen=True)
class ProcSample:
    pid: int
    alive: bool
    proc: ProcStat | None = None
    stack: Stack | None = None
    errors: tuple[str, ...] = ()   # "stack: could not collect: ..." and the like

    @property
    def stack_failure(self) -> str | None:
        """Why the sample has no stack, from the "stack: could not collect: ..." line the capture kept."""
        for error in reversed(self.errors):
            if error.startswith("stack: could not collect: "):
                return error.removeprefix("stack: could not collect: ")
        return None


@dataclass(frozen=True)
class ShmUse:
    """The /dev/shm the ranks see (through the first rank's root: a container's own), where the
    DataLoader workers put the batches they hand over."""

    size_bytes: int
    used_bytes: int


@dataclass(frozen=True)
class CpuQuota:
    """The tightest CPU quota over the first rank's cgroup and its parents (cgroup v2 cpu.max, v1
    cpu.cfs_quota_us), with that cgroup's throttling counters (cpu.stat) at one capture."""

    cgroup: str                    # "/docker/3f2a...", as /proc/PID/cgroup names it
    cores: float                   # quota / period: the CPUs' worth of time the job may use
    periods: int                   # nr_periods
    throttled_periods: int         # nr_throttled
    throttled_s: float             # throttled_usec (v2) or throttled_time (v1), in seconds


@dataclass(frozen=True)
class Snapshot:
    time: float                    # seconds since the epoch, when the capture began
    took_s: float
    processes: tuple[ProcSample, ...]
    gpu: GpuState
    shm: ShmUse | None = None      # the ranks' /dev/shm at this capture; None: not read
    cpu_quota: CpuQuota | None = None   # the ranks' CPU quota and its throttling; None: none set, or not read
    # The step the job's output had printed last at this capture ("step 360", "iter 12", tqdm's
    # "120/500"): a witness of progress where no loop counter can be read. None: no such line, or
    # no output read.
    output_step: int | None = None

    def sample_of(self, pid: int) -> ProcSample | None:
        return self._by_pid.get(pid)

    @cached_property
    def _by_pid(self) -> dict[int, ProcSample]:
        # Built once per snapshot: lookups by pid for every process would be quadratic otherwise.
        index: dict[int, ProcSample] = {}
        for sample in self.processes:
            index.setdefault(sample.pid, sample)
        return index


@dataclass(frozen=True)
class Host:
    hostname: str
    arch: str
    kernel: str
    cpu_count: int
    python_version: str | None
    torch_version: str | None


@dataclass(frozen=True)
class Job:
    run_id: str | None
    master_addr: str | None
    master_port: int | None
    world_size: int | None
    launcher_pid: int | None
    processes: tuple[ProcessInfo, ...]   # every process seen in any sample
    single_process: bool = False

    def by_role(self, role: Role) -> tuple[ProcessInfo, ...]:
        return tuple(p for p in self.processes if p.role is role)

    @cached_property
    def ranks(self) -> tuple[ProcessInfo, ...]:
        """The ranks of the job's newest start on each node: a launcher that restarted its ranks
        (torchrun --max-restarts) left the earlier ones on record, in `all_ranks`."""
        newest = {}
        for proc in self.all_ranks:
            if (proc.host, proc.generation) > newest.get(proc.host, (proc.host, -1)):
                newest[proc.host] = (proc.host, proc.generation)
        kept: dict[tuple, ProcessInfo] = {}
        for proc in self.all_ranks:
            if (proc.host, proc.generation) != newest[proc.host]:
                continue
            key = (proc.host, proc.rank) if proc.rank is not None else (proc.host, None, proc.pid)
            if key not in kept or proc.start_time > kept[key].start_time:
                kept[key] = proc
        return tuple(sorted(kept.values(), key=lambda p: (p.rank is None, p.rank, p.pid)))

    @cached_property
    def all_ranks(self) -> tuple[ProcessInfo, ...]:
        """Every rank process the job had, every start's."""
        return tuple(sorted(self.by_role(Role.RANK), key=lambda p: (p.rank is None, p.rank, p.pid)))

    def info(self, pid: int) -> ProcessInfo | None:
        return self._by_pid.get(pid)

    def children_of(self, rank_pid: int) -> tuple[ProcessInfo, ...]:
        return self._children.get(rank_pid, ())

    # Indexes built once per job: per-rank lookups would be quadratic over thousands of ranks.
    @cached_property
    def _by_pid(self) -> dict[int, ProcessInfo]:
        index: dict[int, ProcessInfo] = {}
        for proc in self.processes:
            index.setdefault(proc.pid, proc)
        return index

    @cached_property
    def _children(self) -> dict[int, tuple[ProcessInfo, ...]]:
        children: dict[int, list[ProcessInfo]] = {}
        for proc in self.processes:
            if proc.rank_pid is not None and proc.role is not Role.RANK:
                children.setdefault(proc.rank_pid, []).append(proc)
        return {pid: tuple(procs) for pid, procs in children.items()}


@dataclass(frozen=True)
class LogTail:
    source: str                    # the file it was read from
    lines: tuple[str, ...]         # the last lines, secrets redacted
    mtime: float | None = None     # when the job last wrote it (None: not known)


@dataclass(frozen=True)
class DataListCopy:
    """A data list a rank's command line names, read at capture time so rules stay pure."""

    path: str                      # as resolved on the job's host
    kind: str                      # "shard" (one tar path a line) or "raw" (JSON lines)
    entries: tuple[str, ...]       # shard paths, or the raw lines' wav paths
    sizes: tuple[int | None, ...]  # bytes of each shard (None: missing or not a file)
    truncated: bool = False        # only the first MAX entries were kept


# --- how a process ended ------------------------------------------------------------------


@dataclass(frozen=True)
class OomCount:
    """The kernel's count of OOM kills, read when hangdoc began watching a process and when it exited.

    `source`: the cgroup file it came from (v2 `memory.events`, v1 `memory.oom_control`) or
    `/proc/vmstat` (the whole machine's). A count that went up while the process ran means the
    OOM killer struck in that cgroup (or on the machine) then: a SIGKILL's likeliest sender."""

    source: str
    before: int | None
    after: int | None

    @property
    def rose(self) -> bool:
        return self.before is not None and self.after is not None and self.after > self.before


@dataclass(frozen=True)
class ProcessExit:
    """How one process of the job ended, read the moment it died (collect/exits.py).

    `source` "zombie": its exit status was read from /proc/PID/stat (exit_code, field 52) while
    it waited to be reaped, so `code` (it exited) or `signal` (it was killed) is known.
    "unseen": it was gone before its status could be read (its parent reaped it first, no
    pidfd on this kernel, another pid namespace, no permission); `errors` say why."""

    pid: int
    time: float                    # seconds since the epoch, when hangdoc saw it exit
    code: int | None = None        # its exit status (0-255) when it exited by itself
    signal: int | None = None      # the signal that killed it
    core_dumped: bool = False
    source: str = "unseen"         # "zombie" or "unseen"
    last_rss_bytes: int | None = None   # its resident memory at the last sample before it vanished
    peak_rss_bytes: int | None = None   # the most any sample saw
    oom: tuple[OomCount, ...] = ()
    errors: tuple[str, ...] = ()   # "could not read ...": facts, not failures

    @property
    def told(self) -> bool:
        """Whether its exit status is known."""
        return self.code is not None or self.signal is not None

    @property
    def failed(self) -> bool:
        return self.signal is not None or (self.code is not None and self.code != 0)

    @property
    def oom_killed(self) -> bool:
        """Killed by SIGKILL while an OOM counter went up."""
        return self.signal == 9 and any(c.rose for c in self.oom)


@dataclass(frozen=True)
class Options:
    interval_s: float | None = None
    hang_after_s: float | None = None
    native: bool = False
    nonblocking: bool = False
    engine: str = "py-spy"         # the stack engine: "py-spy" or "pystack" (older bundles: py-spy)


@dataclass(frozen=True)
class Bundle:
    schema: str
    hangdoc_version: str
    created: float
    host: Host
    job: Job
    samples: tuple[Snapshot, ...]
    logs: tuple[LogTail, ...] = ()
    options: Options = field(default_factory=Options)
    exit_code: int | None = None   # the launcher's, when hangdoc started the job itself
    data_lists: tuple[DataListCopy, ...] = ()
    flight_records: tuple[FlightRecord, ...] = ()   # Flight Recorder dumps read at capture time
    flight_config: tuple[FrConfig, ...] = ()        # each rank's FR settings, from its environment
    flight_errors: tuple[str, ...] = ()             # dumps refused or unreadable, one line each
    ras: RasStatus | None = None
    exits: tuple[ProcessExit, ...] = ()   # how its processes ended, as they died (older bundles: none)
    # The job's own functions its ranks last stood in, outlined from the files (older bundles: none).
    sources: tuple[SourceFunction, ...] = ()
    set_aside: tuple[str, ...] = ()       # what reading it left out (samples out of time order), one line each

    def exit_of(self, pid: int) -> ProcessExit | None:
        """The process's exit record: the one that tells its status when there are several."""
        return self._exit_by_pid.get(pid)

    @cached_property
    def _exit_by_pid(self) -> dict[int, ProcessExit]:
        index: dict[int, ProcessExit] = {}
        for record in self.exits:
            if record.pid not in index or (record.told and not index[record.pid].told):
                index[record.pid] = record
        return index

    @property
    def last(self) -> Snapshot:
        return self.samples[-1]


def store_address(info: ProcessInfo) -> str | None:
    """"localhost:29500": the store the rank's environment points it at (MASTER_ADDR, MASTER_PORT)."""
    host, port = info.env.get("MASTER_ADDR"), info.env.get("MASTER_PORT")
    return f"{host}:{port}" if host and port else None
