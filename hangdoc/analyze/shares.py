"""Where each rank's time goes: shares of its samples over a sliding window of its own steps. Pure.

A sample lands at a random phase of a step (the watch's interval is jittered, and a step is
rarely a divisor of it), so the share of a rank's samples that find it waiting in the gradient
all_reduce estimates the share of each step it waits there. A share from n samples is uncertain
by about 1/sqrt(n): it is shown, and a straggler called, only from MIN_SAMPLES samples, with its
95 % interval (Wilson's, which stays inside 0..1 at small n).

The window: the rank's last WINDOW_SAMPLES samples after its WARMUP_STEPS-th step (start-up,
process-group setup and the first batches are not the job's rhythm), in two halves, so that a
pattern must hold in both to count ("consistently over the window"). The job's pauses are left
out of every rank's window: stretches in which a rank of the bundle did not step for far longer
than its steady steps (one rank evaluating every N steps while the others wait). A straggler costs
every step; a pause does not.
"""
from __future__ import annotations

import bisect
import statistics
from collections import Counter

from hangdoc.analyze.classify import WORK_WAIT, is_gpu_sync, place
from hangdoc.analyze.progress import step_times
from hangdoc.analyze.timeline import Point, Timeline
from hangdoc.base.stats import interval
from hangdoc.model import RankState, ShareCounts, TimeShares

WINDOW_SAMPLES = 30      # 60 s at the default interval
MIN_SAMPLES = 12         # a share from fewer is too uncertain (+-28 points at worst, 95 %)
WARMUP_STEPS = 3
# The collectives of a training step: waits there are what a straggler costs the others every step.
# A barrier or a broadcast is a pause (a validation, a checkpoint), not the step's. all_gather is
# the step's in HF Trainer (accelerate gathers each batch's token count before the forward).
# Where ranks split between two collectives, the one here is the common path (diagnose.py).
STEP_COLLECTIVES = frozenset({"all_reduce", "DDP gradient all_reduce (backward)", "DDP forward sync",
                              "reduce_scatter", "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor",
                              "_all_gather_base", "_reduce_scatter_base"})


def is_step_wait(detail: object) -> bool:
    """A wait in the step's own collectives, or at a sync on the GPU stream that its GPU did not
    show to be work (NCCL queues the step's collectives there: the host waits at the next sync), or
    on a collective's Work the job's own line holds (`while not w.is_completed(): pass`)."""
    return str(detail) in STEP_COLLECTIVES or is_gpu_sync(detail) or detail == WORK_WAIT


def window(line: Timeline) -> list[Point]:
    """The rank's samples in its sliding window (see module doc); empty before its warm-up ends.
    The job's pauses are left out (`job_pauses`)."""
    steps = step_times(line)
    if len(steps) < WARMUP_STEPS:
        return []
    start = steps[WARMUP_STEPS - 1]
    fresh = [p for p in line.points if p.fresh and p.time > start and p.reading.state != RankState.EXITED]
    stretches = job_pauses(line)
    if not stretches:
        return fresh[-WINDOW_SAMPLES:]
    starts = [a for a, _ in stretches]
    kept: list[Point] = []
    for point in reversed(fresh):          # from the newest, as far back as the window reaches
        i = bisect.bisect_left(starts, point.time) - 1
        if i < 0 or point.time > stretches[i][1]:
            kept.append(point)
            if len(kept) == WINDOW_SAMPLES:
                break
    return kept[::-1]


def job_pauses(line: Timeline) -> list[tuple[float, float]]:
    """The job's pauses, as its ranks in this bundle saw them: a pause of one rank's (it waits while
    another evaluates) is the job's, so every rank's window leaves it out and the ranks' shares
    compare over the same stretches of time (the rank that evaluates steps through its own loop
    meanwhile, and its evaluation is no share of a step)."""
    peers = line.peers
    if peers is None:
        return [s for s in _rank_pauses(line) if not _data_stall(s, [line])]
    if "pauses" not in peers.memo:
        merged = _merged(stretch for rank in peers.lines for stretch in _rank_pauses(rank))
        peers.memo["pauses"] = [s for s in merged if not _data_stall(s, peers.lines)]
    return peers.memo["pauses"]


DATA_STALL_SHARE = 0.5   # a stretch in which a rank waited on its DataLoader this share of its samples


def _data_stall(stretch: tuple[float, float], lines) -> bool:
    """A rank waited on its DataLoader through most of the stretch: the data kept the job, as it
    keeps each step a straggler's workers are late for (their prefetched batches come in bursts, the
    waits between them long); no pause to leave out, but the straggler's cost."""
    start, end = stretch
    for line in lines:
        inside = [p for p in line.points if p.fresh and start < p.time <= end]
        if len(inside) >= 2 and sum(p.reading.state == RankState.DATALOADER for p in inside) \
                >= DATA_STALL_SHARE * len(inside):
            return True
    return False


def _merged(stretches) -> list[tuple[float, float]]:
    """Stretches (start, end] merged where they overlap, in order: each point falls in at most one."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(stretches):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _rank_pauses(line: Timeline) -> list[tuple[float, float]]:
    steps = step_times(line)
    if len(steps) < WARMUP_STEPS:
        return []
    return _merged(pauses(steps[WARMUP_STEPS - 1:], line.last.time))


PAUSE_MULTIPLE = 3.0     # a stretch without a step this many times the rank's steady gap is a pause
PAUSE_GAPS = 3           # gaps between steps seen before a steady gap is known


def pauses(steps: list[float], end: float) -> list[tuple[float, float]]:
    """The stretches (start, end] in which a rank did not step for PAUSE_MULTIPLE times its steady
    gap between steps (the median), the one under way at `end` too: an evaluation on one rank
    every N steps, a checkpoint, while the others wait at their sync line. A straggler costs the
    others every step, so its waits fall in the steady rhythm; a pause's all fall in a few long
    stretches. Its samples say what the job does in a pause, not what each step costs."""
    gaps = [b - a for a, b in zip(steps, steps[1:])]
    if len(gaps) < PAUSE_GAPS:
        return []
    limit = PAUSE_MULTIPLE * statistics.median(gaps)
    return [(a, b) for a, b in [*zip(steps, steps[1:]), (steps[-1], end)] if b - a > limit]


PLACES_KEPT = 3          # a rank's places counted in its shares: the ones it was caught at most


def count(points: list[Point]) -> ShareCounts:
    step_wait = other_wait = data = compute = io = 0
    places: Counter[str] = Counter()
    waited: set[str] = set()
    for point in points:
        state, detail = point.reading.state, point.reading.detail
        if state == RankState.COLLECTIVE:
            if is_step_wait(detail):
                step_wait += 1
            else:
                other_wait += 1
        elif state == RankState.DATALOADER:
            data += 1
        elif state == RankState.COMPUTE:
            compute += 1
        elif state == RankState.IO:
            io += 1
        spot = place(point.sig)[0] if point.sig else None
        # The job's own lines only: a sync line is the job's (`.item()`, a flag it spins on); a
        # barrier or a broadcast in torch's frames is a pause, counted above.
        if state in (RankState.COMPUTE, RankState.COLLECTIVE) and not is_step_wait(detail) and spot is not None \
                and spot.is_job_code:
            label = spot.label
            places[label] += 1
            if state == RankState.COLLECTIVE:
                waited.add(label)
    kept = tuple(sorted(places.most_common(PLACES_KEPT), key=lambda kv: (-kv[1], kv[0])))
    return ShareCounts(len(points), step_wait, other_wait, data, compute, io, places=kept,
                       waited=tuple(sorted(waited & {label for label, _ in kept})))


def rank_shares(line: Timeline) -> tuple[ShareCounts, ...]:
    """The window's counts in two halves (earlier, later); () when the window is too short."""
    points = window(line)
    if len(points) < MIN_SAMPLES:
        return ()
    half = len(points) // 2
    return count(points[:half]), count(points[half:])


def total(halves: tuple[ShareCounts, ...]) -> ShareCounts:
    out = ShareCounts()
    for part in halves:
        out = out + part
    return out


def time_shares(line: Timeline | None, halves: tuple[ShareCounts, ...] | None = None,
                runqueue: float | None = None) -> TimeShares | None:
    """Where a rank's time went over its last steps, as shares with their 95 % intervals (from
    `halves` and `runqueue` when the digest has them already, else from the rank's timeline)."""
    if halves is None:
        halves = rank_shares(line) if line is not None else ()
        runqueue = runqueue_share(line) if line is not None else None
    if not halves:
        return None
    whole = total(halves)

    def share(hits: int) -> float:
        return round(hits / whole.n, 3)

    return TimeShares(whole.n, share(whole.step_wait), share(whole.other_wait), share(whole.data),
                      share(whole.compute), share(whole.io),
                      tuple(round(x, 3) for x in interval(whole.step_wait, whole.n)),
                      tuple(round(x, 3) for x in interval(whole.data, whole.n)), runqueue)



def runqueue_share(line: Timeline) -> float | None:
    """The share of the rank's window its main thread waited on a run queue for a CPU (schedstat);
    None: no window, or the kernel's counter not read."""
    points = [p for p in window(line) if p.main is not None and p.main.runqueue_s is not None]
    if len(points) < 2 or points[-1].time <= points[0].time:
        return None
    queued = points[-1].main.runqueue_s - points[0].main.runqueue_s
    return round(max(0.0, queued) / (points[-1].time - points[0].time), 3)


def workers_cpu(line: Timeline, workers: list[Timeline]) -> float | None:
    """The cores the rank's live workers used over its window (None: no window, or no CPU read)."""
    points = window(line)
    if len(points) < 2:
        return None
    start, end = points[0].time, points[-1].time
    used = 0.0
    for worker in workers:
        inside = [p for p in worker.points if start <= p.time <= end and p.cpu_s is not None]
        if len(inside) >= 2:
            used += inside[-1].cpu_s - inside[0].cpu_s
    return round(used / (end - start), 2) if end > start and workers else None
