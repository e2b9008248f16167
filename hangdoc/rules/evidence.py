"""The lines and records the rules cite about ranks and workers: a rank's state and wait, its
workers, a worker's habit, the workers that died, what the GPUs say of a wait. What one process's
samples say is `rules/samples.py`'s; the job's output `rules/logs.py`'s; its data `rules/decoding.py`'s."""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.analyze.diagnose import RankView
from hangdoc.analyze.timeline import CPU_NOISE_S, WAKEUPS_PER_DUMP
from hangdoc.base.words import rank_set
from hangdoc.model import Bundle, GpuActivity, RankState
from hangdoc.model.gpu import gpu_activity
from hangdoc.model.logline import line_rank, strip_rank
from hangdoc.rules.samples import cpu_use, samples_of, usual_line


def rank_line(ctx, view: RankView) -> str:
    frame = view.reading.frame.label if view.reading.frame else "no stack"
    detail = f" in {view.reading.detail}" if view.reading.detail else ""
    held = ctx.diagnosis.decided_at - ctx.on_clock(view.state_since)
    record = ctx.bundle.exit_of(view.info.pid) if view.reading.state is RankState.EXITED else None
    if record is not None and record.told:
        how = f"exited with code {record.code}" if record.signal is None else f"was killed by signal {record.signal}"
        return f"rank {view.info.rank} (pid {view.info.node_pid}): {how} {held:.0f} s before"
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
    quiet = ctx.diagnosis.decided_at - ctx.on_clock(since)
    parts = [f"rank {view.info.rank} has not stepped for {quiet:.0f} s"
             + (f" (its loop stands at {', '.join(counters[:4])})" if counters else "")]
    a = first.proc.main_thread if first.proc else None
    b = last.proc.main_thread if last.proc else None
    if not counters and (a is None or b is None):
        return None    # an older bundle: nothing beyond what the straggler line says
    if a is not None and b is not None:
        sleeps, cpu = b.voluntary_switches - a.voluntary_switches, b.cpu_s - a.cpu_s
        reads = f"each stack read that pauses it adds {WAKEUPS_PER_DUMP}"
        if cpu <= CPU_NOISE_S:       # neither ran nor woke of its own: asleep in the wait, whatever it counted
            woke = f"{sleeps} wake-up{'s' if sleeps != 1 else ''}, {reads}" if sleeps > 0 else "no wake-up"
            parts.append(f"its main thread was asleep in its wait ({cpu:.2f} s of CPU, {woke})")
        elif sleeps <= 0:
            parts.append(f"its main thread used {cpu:.2f} s of CPU and never went to sleep (a spin)")
        else:
            parts.append(f"its main thread used {cpu:.2f} s of CPU and went to sleep {sleeps} "
                         f"time{'s' if sleeps != 1 else ''} ({reads})")
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
        held = ctx.blocked_for(worker.pid) if ctx is not None else None
        doing = f"blocked {reading.detail} for {held:.0f} s" if held is not None else reading.state
        lines.append(f"  worker {index} (pid {worker.node_pid}): {doing} at {where}")
    gone = sum(not alive for _, _, alive in view.workers)
    if gone:
        lines.append(f"  {gone} more worker(s) exited")
    return lines


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


def worker_name(worker) -> str:
    index = worker.worker_index if worker.worker_index is not None else "?"
    return f"worker {index} (pid {worker.node_pid})"


@dataclass(frozen=True)
class DeadWorker:
    """A DataLoader worker that died: from the log line PyTorch prints, its exit record, or seen
    alive then gone alone while its rank waits for data (hangdoc/analyze/workers.py decides)."""

    pid: int | None                # None: the samples cannot name it (its own dying line and its rank's failure tell it)
    rank: int | None
    how: str                       # "Segmentation fault", "Killed", "exited unexpectedly", "vanished"
    log: str | None                # the log line that says so, without torchrun's prefix
    info: object | None            # its ProcessInfo when the capture saw it alive
    why: str | None = None         # the sign that decided it, when it was not the log line
    among: tuple[int, ...] = ()    # pid None: the workers it is one of, gone at one sample (none: no worker seen)
    gone_at: float | None = None   # ... the sample that first saw them gone


def fates(ctx) -> dict:
    """Rank pid -> RankWorkers: every worker's fate (live, retired, dead), as the analysis worked it out."""
    return ctx.worked.fates


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
    unseen: list[DeadWorker] = []
    for rank_pid, rank in fates(ctx).items():
        owner = bundle.job.info(rank_pid)
        for w in rank.dead:
            dead[w.pid] = DeadWorker(w.pid, owner.rank if owner else w.info.rank, w.how or "vanished",
                                     strip_rank(w.log) if w.log else None, w.info, None if w.log else w.why)
        unseen += [DeadWorker(None, owner.rank if owner else None, told.how, strip_rank(told.line), None,
                              None, told.among, told.gone_at) for told in rank.untold]
    lines = ctx.worked.killed_lines
    for pid, how in ctx.worked.killed_workers.items():
        if pid in dead:
            continue
        info = bundle.job.info(pid)
        rank = info.rank if info is not None and info.rank is not None else line_rank(lines.get(pid, ""))
        if rank is None and len(d.culprits) == 1:
            rank = d.culprits[0]
        dead[pid] = DeadWorker(pid, rank, how, strip_rank(lines[pid]) if pid in lines else None, info)
    return sorted(dead.values(), key=lambda w: (w.rank is None, w.rank, w.pid)) + unseen


def gpu_lines(ctx, waiting: list[RankView], culprit: RankView) -> list[str]:
    """What the GPUs say of the wait, at the last sample: the waiting ranks' kernels spinning at an
    idle GPU's power (100 % utilisation that is not work), and what the culprit's GPU does."""
    gpu = ctx.bundle.last.gpu
    synced = [r for v in waiting if ctx.is_gpu_sync(v.reading.detail) for r in v.ranks]
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


MIN_SAMPLES = 6          # fewer samples say too little about a rank's share of waiting on data
STARVED_SHARE = 0.5      # a rank waiting on data in at least half its samples


def data_shares(ctx) -> list[tuple[int, int, int]]:
    """(rank, samples waiting in DataLoader.__next__, samples alive) for each rank."""
    out = []
    for view in ctx.diagnosis.ranks:
        line = ctx.timelines.get(view.info.pid)
        if line is None or view.info.rank is None:
            continue
        states = [p.reading.state for p in line.points if p.reading.state not in (RankState.EXITED, RankState.UNKNOWN)]
        out.append((view.info.rank, sum(s == RankState.DATALOADER for s in states), len(states)))
    return out
