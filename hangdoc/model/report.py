"""What a report says: findings, the ranks as the reader sees them, the verdict."""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.base.words import expand_ranges
from hangdoc.model.vocab import GpuActivity, Progress, RankState, Severity, SlowKind, Verdict, WorkerState
from hangdoc.model.wrapper import Wrapper

REPORT_SCHEMA = "hangdoc/report-v1"


@dataclass(frozen=True)
class Finding:
    rule: str                      # a stable slug: "collective-straggler"
    severity: Severity
    ranks: tuple[int, ...]
    title: str                     # one line
    evidence: tuple[str, ...]      # frames, files, numbers, log lines
    fix: str
    # What makes a job that moves data-bound, in a few words a slow or healthy verdict's headline
    # carries ("workers confined to CPU 0"); None: the finding names no such cause.
    cause: str | None = None


@dataclass(frozen=True)
class WorkerReport:
    pid: int
    index: int | None
    state: WorkerState
    top_frame: str | None
    alive: bool = True


@dataclass(frozen=True)
class RankGpu:
    """A rank's GPU at the last sample, as the report shows it."""

    index: int
    utilization_pct: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    memory_used_bytes: int | None = None
    activity: GpuActivity | None = None    # idle / busy / spin (a kernel running at idle power: a wait)


@dataclass(frozen=True)
class GpuTrend:
    """A rank's GPU over the last samples (oldest first), for the live view's sparklines."""

    utilization_pct: tuple[int | None, ...]
    power_w: tuple[float | None, ...]
    power_limit_w: float | None = None


@dataclass(frozen=True)
class StackClass:
    """Ranks whose main threads stood in one stack at the last sample (an equivalence class, as
    LLNL's STAT builds them): the frames of its lowest rank, innermost first, as labels."""

    ranks: tuple[int, ...]
    frames: tuple[str, ...]


@dataclass(frozen=True)
class FlightSummary:
    """The ranks' Flight Recorder settings in a few facts, for `ps` and the live view."""

    states: tuple[str, ...]
    buffer_sizes: tuple[int, ...]
    pipes: int                 # ranks whose dump pipe exists
    ranks: int                 # ranks whose settings were read
    dumps: int = 0             # dumps read so far


RUNQUEUE_SAID = 0.05    # a main thread's wait for a CPU is said from this share of its time (less is the machine's noise)


@dataclass(frozen=True)
class TimeShares:
    """Where a rank's time went over its last steps: shares (0..1) of its samples in the window."""

    samples: int
    step_wait: float               # in the training step's collectives (waiting for the others)
    other_wait: float              # in other collectives (a barrier, a broadcast)
    data: float                    # waiting on its DataLoader
    compute: float
    io: float
    step_wait_interval: tuple[float, float] = (0.0, 1.0)   # 95 % (Wilson) of step_wait
    data_interval: tuple[float, float] = (0.0, 1.0)        # 95 % of data
    # The share of its time its main thread waited on a run queue for a CPU (schedstat), across the
    # shares above (a thread runnable but not running is caught at any of its frames); None: not read.
    runqueue: float | None = None

    @property
    def runqueue_said(self) -> float | None:
        """The run-queue share where it is worth a word (RUNQUEUE_SAID and more), else None."""
        return self.runqueue if self.runqueue is not None and self.runqueue >= RUNQUEUE_SAID else None

    @property
    def other(self) -> float:
        """The rest of its samples: asleep outside those (a lock, a queue, a prompt) or no stack read."""
        return max(0.0, round(1 - (self.step_wait + self.other_wait + self.data + self.compute + self.io), 3))

    def parts(self) -> tuple[tuple[str, float], ...]:
        """Every share of the whole, in the order the report says them: they add up to 1."""
        return (("step_wait", self.step_wait), ("other_wait", self.other_wait), ("data", self.data),
                ("compute", self.compute), ("io", self.io), ("other", self.other))


@dataclass(frozen=True)
class Slowness:
    """Why a job that moves is slow, and what it costs (a slow verdict, or a job that ended well slowly)."""

    kind: SlowKind                 # straggler: a few ranks make the others wait; data-bound: every rank waits on data
    stragglers: tuple[int, ...]
    others_wait: float             # straggler: the share of each step the others wait; data-bound: the least data-wait share
    straggler_wait: float          # the stragglers' own step-wait share
    speedup_at_most: float         # the job without the straggler (or with data on time): an upper bound
    doing: str | None              # what keeps the stragglers: compute, dataloader-wait, io, cpu-wait (the machine)
    samples: int                   # the fewest samples a rank's shares rest on
    at: str | None = None          # 0.6: where the others wait when it is a sync line of the job's own (NCCL's
                                   # shape: the step's collectives return at once, the host waits at `.item()`)
    # One batch longer than the hang threshold while the data moves on (analyze/slow.py: long_batch):
    # how long the stragglers have waited on it, when the next is estimated, and their data's pace.
    waited_s: float | None = None
    next_batch_s: float | None = None
    pace: DataPace | None = None


@dataclass(frozen=True)
class DataPace:
    """How a DataLoader worker's data moves through one file: the reading a long batch is waiting on."""

    rank: int | None
    worker: int | None             # its index among the rank's workers
    pid: int
    path: str
    rate_bytes_s: float | None     # read forward a second (what it read again after a rewind included)
    rewinds: int                   # backward seeks seen: each one decompresses again from the file's start
    furthest: int                  # the furthest offset it reached
    size: int | None               # the file's size
    # A file of the stragglers' workers reads the same lap again at several points, not yet often
    # enough to call it a rewind for ever (analyze/passes.py): the slow verdict waits to settle.
    converging: bool = False


@dataclass(frozen=True)
class RankReport:
    rank: int | None
    pid: int
    host: str
    state: RankState
    waiting_s: float
    progress: Progress
    gpu: RankGpu | None
    top_frame: str | None
    workers: tuple[WorkerReport, ...] = ()
    group_rank: int | None = None  # torchrun's node (agent) index: which node the rank runs on
    # A row of a merged report may stand for a class of ranks (same state, stack and workers):
    # `rank` is its lowest, `rank_set` all of them ("0-2047,2050-65535"), `rank_count` how many.
    rank_count: int = 1
    rank_set: str | None = None
    gpu_trend: GpuTrend | None = None
    # DataLoader workers that ended with their epoch, loader or rank (not rows in `workers`,
    # which holds the live ones and the dead ones).
    retired_workers: int = 0
    shares: TimeShares | None = None   # where its time went over its last steps (None: too few samples)
    # Where its rank was read, when no environment variable named it (torch.multiprocessing.spawn:
    # its stack; Lightning's launcher: the script's own process is rank 0); None: RANK and the like.
    rank_source: str | None = None
    # The programs its launcher ran it under, outermost first, the last its parent (pids on its node).
    wrappers: tuple[Wrapper, ...] = ()

    @property
    def members(self) -> tuple[int, ...]:
        """The ranks this row stands for: its class's, or its own."""
        if self.rank_set:
            return tuple(expand_ranges(self.rank_set))
        return (self.rank,) if self.rank is not None else ()


@dataclass(frozen=True)
class Witness:
    """One witness of progress and what it said over the stretch a verdict rests on."""

    name: str                      # "loop counters", "stack", "main threads", "bytes", "workers"
    moved: bool | None             # None: it could not be read
    said: str


@dataclass(frozen=True)
class Threshold:
    """How hang was told from slow: the threshold, where it came from, and the quiet so far."""

    source: str                    # "given" (--hang-after), "learned" (the job's steps), "default";
                                   # "past": named from a wait already under way at attach (BeforeAttach)
    hang_after_s: float
    longest_step_s: float | None   # the longest gap between two steps of one rank, as seen
    steps_seen: int
    quiet_s: float                 # how long no rank has stepped (nor done I/O of its own)
    signal: str                    # "loop" (the job's counters) or "frames" (no counters could be read)
    # What each witness of progress said since the job went quiet (a hang or a suspicion only).
    witnesses: tuple[Witness, ...] = ()
    # Seconds since data or a GPU last moved, where that came after the last step (progress: slow,
    # not hung), and which moved: "data" (DataLoader workers reading new ground in their files)
    # or "gpu" (a rank's GPU at work); None otherwise.
    moving_s: float | None = None
    moving: str | None = None
    start: int = 0                 # the start of a restarted job its figures come from (torchrun's restart count)
    # What proved the hang before the threshold passed, in the report's words (analyze/proofs.py):
    # a positive fact of /proc or the stacks that two samples agreed on. None: the threshold named it.
    proof: str | None = None


@dataclass(frozen=True)
class BeforeAttach:
    """What the system already knew of the job's past at hangdoc's first sample."""

    waited_s: float | None = None    # the longest a waiting rank had sat in its wait, off the CPU
    rank: int | None = None          # that rank
    wait: str | None = None          # what it waited in
    others_asleep: bool = False      # every live rank outside the wait was asleep too
    decided: bool = False            # the hang was named from this evidence, before the threshold passed
    log: str | None = None           # the log file the job wrote last ...
    log_quiet_s: float | None = None   # ... and how long before the first sample
    told_by: str = "kernel"          # what told the wait: "kernel" (off-CPU time), "flight-recorder",
                                     # "watch" (a rank spinning in its wait: from hangdoc's first sample), or
                                     # "peers" (the ranks outside the wait, which it needs, off the CPU since)
    # The job's loop position against its age, at the first sample: rank `rank`'s counter
    # `loop_counter` stood at `loop_value` in a process `loop_age_s` old (bounds its mean step).
    loop_counter: str | None = None
    loop_value: int | None = None
    loop_age_s: float | None = None


@dataclass(frozen=True)
class Span:
    """A stretch of a lane in one state, in seconds from the report's first sample: from the sample
    that first read the state to the one that read the next (the last reaches the last sample)."""

    state: str                     # a RankState or, on a worker's lane, a WorkerState
    start_s: float
    end_s: float
    detail: str | None = None      # what it waits in, or its top frame


@dataclass(frozen=True)
class Lane:
    """One rank (a class of ranks in a merged report, or a rank's DataLoader worker) over the watched
    time, as the HTML report and the trace draw it; times in seconds from the report's first sample.
    Bounded: equal states merged into spans, spans, steps and series capped at a few hundred."""

    rank: int | None
    pid: int
    spans: tuple[Span, ...]
    steps: tuple[float, ...] = ()                     # when the rank's loop moved on
    cpu_pct: tuple[tuple[float, float], ...] = ()     # (time, % of a core): the main thread's (a worker's: the process's)
    gpu_util_pct: tuple[tuple[float, float], ...] = ()
    gpu_power_w: tuple[tuple[float, float], ...] = ()
    culprit: bool = False
    rank_set: str | None = None    # a class's ranks, as RankReport.rank_set
    rank_count: int = 1
    worker: int | None = None      # a lane in `workers`: the worker's DataLoader index, when known
    workers: tuple[Lane, ...] = ()   # a rank's live and dead workers' lanes
    # Its retired workers' lanes (ended with their epoch, their loader or their rank), the latest
    # few, and how many there were: drawn folded, apart from the workers that matter now.
    retired: tuple[Lane, ...] = ()
    retired_count: int = 0
    retired_earlier: bool = True   # every retired worker is of an earlier generation than the newest
    # The start of the ranks it belongs to, in a job its launcher restarted (0: the first start);
    # None: the job was never restarted. The earlier starts' lanes follow the newest one's.
    generation: int | None = None


@dataclass(frozen=True)
class RestartMark:
    """The launcher started the ranks again (torchrun --max-restarts): when, the how-many-th, and
    the failure that made it (seconds from the report's first sample)."""

    at_s: float
    generation: int                # the start it began (1: the first restart)
    failed_rank: int | None = None
    how: str | None = None         # "exited with code 1", "was killed by SIGKILL"


def class_members(ranks: tuple[RankReport, ...]) -> dict[int, tuple[int, ...]] | None:
    """Rank -> the ranks its row stands for, when the rows stand for classes; else None."""
    if all(r.rank_set is None for r in ranks):
        return None
    return {r.rank: r.members for r in ranks if r.rank is not None}


@dataclass(frozen=True)
class Report:
    schema: str
    verdict: Verdict
    detected_after_s: float | None
    culprit_ranks: tuple[int, ...]
    findings: tuple[Finding, ...]
    ranks: tuple[RankReport, ...]
    # How long until the process group's timeout kills the job (and the evidence): an estimate
    # from the backend's default (NCCL 600 s, gloo 1800 s) since code can set its own.
    pg_timeout_s: float | None = None
    timeout_remaining_s: float | None = None
    host: str | None = None
    threshold: Threshold | None = None
    # What every format prints besides the verdict and the rows (report-v1 fields added in 0.1):
    cause: tuple[str, ...] = ()              # a crash's exception, quoted from the job's own output
    missing_stacks: tuple[str, ...] = ()     # ranks without a stack, and why
    stack_tree: tuple[str, ...] = ()         # the ranks' main-thread stacks as a folded prefix tree
    stack_classes: tuple[StackClass, ...] = ()
    samples: int = 0                         # samples the verdict was read from
    flight: FlightSummary | None = None      # the ranks' Flight Recorder settings, when read
    before: BeforeAttach | None = None       # the job's past as the system knew it when hangdoc attached
    slow: Slowness | None = None             # a straggler or data-bound job (verdict slow, or a job that ended well slowly)
    lanes: tuple[Lane, ...] = ()             # each rank over the watched time (analyze/lanes.py)
    restarts: tuple[RestartMark, ...] = ()   # the launcher's restarts of the ranks, as the timeline marks them
    backend: str | None = None               # the process group's backend, "nccl" or "gloo" (None: not read)

    @property
    def class_members(self) -> dict[int, tuple[int, ...]] | None:
        """Rank -> the ranks it stands for, when the rows stand for classes; else None."""
        return class_members(self.ranks)

    @property
    def failed(self) -> bool:
        """The job failed: a hang or a crash (`Verdict.failed`)."""
        return Verdict(self.verdict).failed

    @property
    def ranks_seen(self) -> int:
        return sum(r.rank_count for r in self.ranks)
