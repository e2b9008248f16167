"""Slow is a verdict: a job that moves, but whose straggler (or data) costs every step a large share. Pure.

From the ranks' time shares over their last steps (`shares.py`, folded in digests):
- **straggler**: the others wait in the step's collectives (the gradient all_reduce) at least
  SLOW_WAIT_SHARE of their samples, and a few ranks (at most half) wait at least GAP less: the
  ones the others wait for. It must hold in both halves of the window and the intervals must
  part (the straggler's 95 % upper bound below the others' lower bound). Ranks that take turns
  waiting (jitter) have like shares; a pause the others spend in a barrier (a validation, a
  checkpoint) is not the step's wait; a rank that mostly writes (a checkpoint) is pausing.
- **data-bound**: every rank waits on its DataLoader at least DATA_BOUND_SHARE of its samples, in
  both halves: the data, not a rank, sets the pace. Or one batch outlasts the hang threshold while
  the waiting ranks' DataLoader workers move on through their data (`long_batch`): no rank stepped,
  but the data moves; slow, not hung, unless the batch would outlast the process group's timeout.

The speed-up it costs is an upper bound from the shares: without the straggler each step
would lose at most the others' extra wait, (1 - (w_others - w_straggler)) of its time; with data
on time, at most the least-starved rank's data wait.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hangdoc.analyze.past import gone
from hangdoc.analyze.shares import total
from hangdoc.base.stats import interval
from hangdoc.model import RankDigest, RankState, ShareCounts, SlowKind

SLOW_WAIT_SHARE = 0.30
GAP = 0.25
DATA_BOUND_SHARE = 0.5
HALF_DATA_SHARE = 0.4     # ... and in each half at least this


@dataclass(frozen=True)
class SlowCall:
    kind: SlowKind
    stragglers: tuple[int, ...]      # the ranks the others wait for (data-bound: none, it is every rank)
    others_wait: float               # straggler: the others' step-wait share; data-bound: the least data-wait share
    straggler_wait: float            # the stragglers' own step-wait share (data-bound: 0)
    speedup: float                   # an upper bound: the job without the straggler, or with data on time
    samples: int                     # the fewest samples a rank's shares rest on
    doing: str | None                # what keeps the stragglers: compute, dataloader-wait, io, or cpu-wait (the machine)
    at: str | None = None            # where the others wait, when it is a sync line of the job's own (NCCL's shape)
    # What told `doing`: each activity's share of a step for the stragglers against the others', and
    # the cores their DataLoader workers used (straggler, others; None: not read).
    excess: tuple[tuple[str, float, float], ...] = ()
    workers_cpu: tuple[float | None, float | None] = (None, None)
    # A batch longer than the hang threshold while the stragglers' workers' data moves on: how long
    # they have waited on it, and when the next batch is estimated (`long_batch`).
    waited_s: float | None = None
    next_batch_s: float | None = None


def _share(counts: ShareCounts, field: str) -> float:
    return getattr(counts, field) / counts.n if counts.n else 0.0


def slow_call(ranks: Sequence[RankDigest]) -> SlowCall | None:
    """The slow call over the ranks' shares; None when the job is not slow (or too few samples).

    A rank that has exited counts with the shares its window had: a job ending raggedly (one rank
    out, the next still finishing) keeps the pace it had, so the last rounds of a watch and the
    report of the ended job say the same. One that left before it had shares holds nothing back."""
    counted = [r for r in ranks if len(r.shares) == 2 and r.rank is not None]
    if not counted or any(not gone(r) and (len(r.shares) != 2 or r.rank is None) for r in ranks):
        return None        # a live rank without shares: too early to compare
    return _data_bound(counted) or _straggler(counted) or _sync_straggler(counted)


def _data_bound(ranks: list[RankDigest]) -> SlowCall | None:
    shares = []
    for r in ranks:
        whole = total(r.shares)
        low, _ = interval(whole.data, whole.n)
        if (_share(whole, "data") < DATA_BOUND_SHARE or low < DATA_BOUND_SHARE - 0.15
                or any(_share(h, "data") < HALF_DATA_SHARE for h in r.shares)):
            return None
        shares.append(_share(whole, "data"))
    least = min(shares)
    n = min(total(r.shares).n for r in ranks)
    return SlowCall(SlowKind.DATA_BOUND, (), round(least, 3), 0.0, _speedup(least, n), n, RankState.DATALOADER)


def _speedup(saved: float, n: int) -> float:
    """The job's speed-up when `saved` of each step is no longer lost: 1 / (1 - saved), with what
    is left of a step no smaller than one sample's worth (1/n): n samples that all found the wait
    cannot tell 2 % of a step from 0 %, and a bound of 1000x would be the arithmetic's, not theirs."""
    return round(1 / max(1 - saved, 1 / max(n, 1)), 2)


def _step_wait(counts: ShareCounts) -> int:
    return counts.step_wait


def _straggler(ranks: list[RankDigest], waits: Callable[[ShareCounts], int] = _step_wait,
               at: str | None = None) -> SlowCall | None:
    """The straggler by the shares of `waits` (samples waiting for the others): in the step's
    collectives, or at the job's own sync line (`at`)."""
    if len(ranks) < 2:
        return None

    def share(counts: ShareCounts) -> float:
        return waits(counts) / counts.n if counts.n else 0.0

    wait = {r.rank: share(total(r.shares)) for r in ranks}
    reference = statistics.median(wait.values()) if len(ranks) >= 3 else max(wait.values())
    late = [r for r in ranks if wait[r.rank] <= reference - GAP and not _pausing(total(r.shares))]
    if not late or len(late) > len(ranks) / 2:
        return None
    others = [r for r in ranks if r not in late]
    pooled = total(tuple(total(r.shares) for r in others))
    others_wait = share(pooled)
    if others_wait < SLOW_WAIT_SHARE:
        return None
    others_low, _ = interval(waits(pooled), pooled.n)
    for r in late:
        whole = total(r.shares)
        _, high = interval(waits(whole), whole.n)
        if high >= others_low:
            return None                  # the intervals overlap: not told apart
    for half in (0, 1):
        theirs = share(total(tuple(r.shares[half] for r in others)))
        if any(share(r.shares[half]) > theirs - GAP / 2 for r in late):
            return None                  # not in both halves: a pause, not a straggler
    mine = total(tuple(total(r.shares) for r in late))
    straggler_wait = share(mine)
    saved = max(0.0, others_wait - straggler_wait)
    n = min(total(r.shares).n for r in ranks)
    doing, excess, cores = _cause(mine, pooled, late, others, at)
    return SlowCall(SlowKind.STRAGGLER, tuple(sorted(r.rank for r in late)), round(others_wait, 3),
                    round(straggler_wait, 3), _speedup(saved, n), n, str(doing), at, excess, cores)


WORKERS_BUSIER = 1.5        # the stragglers' workers use this many times the others' cores (and more than a tenth)
CPU_WAIT = "cpu-wait"       # the stragglers' cause when they wait for a CPU: the machine's share, not their work
QUEUED = 0.2                # ... their main threads wait on a run queue at least this share of the time
QUEUED_MORE = 0.15          # ... and this much more than the others' do


def _cause(mine: ShareCounts, theirs: ShareCounts, late: list[RankDigest], others: list[RankDigest],
           at: str | None) -> tuple[RankState | str, tuple, tuple[float | None, float | None]]:
    """What keeps the stragglers: their DataLoader, their own compute or their files. The ranks of a
    job step together, so each activity's share of a step compares as time: the activity the
    stragglers spend more of their step on than the others do is the cause. Their workers are the
    second witness: workers burning far more CPU than the others' make it the data, even where the
    rank is caught computing (its workers take the cores its compute needs). The run queue is the
    third: a straggler whose main thread waits for a CPU far more than the others' is slowed by the
    machine (other processes on its CPUs), whatever its frames say it was doing when it got one;
    unless the data keeps it, its own busier workers being the processes on its CPUs."""
    def shares(counts: ShareCounts) -> dict[RankState, float]:
        n = counts.n or 1
        compute = max(0, counts.compute - (counts.at(at) if at is not None else 0))
        return {RankState.COMPUTE: compute / n, RankState.DATALOADER: counts.data / n, RankState.IO: counts.io / n}

    own, base = shares(mine), shares(theirs)
    excess = tuple((str(state), round(own[state], 3), round(base[state], 3)) for state in own)
    doing = max(own, key=lambda state: (own[state] - base[state], own[state]))
    cores = (_mean(late, "workers_cpu"), _mean(others, "workers_cpu"))
    if (cores[0] is not None and cores[1] is not None and cores[0] >= WORKERS_BUSIER * cores[1] + 0.1
            and own[RankState.DATALOADER] > base[RankState.DATALOADER]):
        doing = RankState.DATALOADER
    queued = (_mean(late, "runqueue"), _mean(others, "runqueue"))
    if queued[0] is not None and queued[1] is not None:
        excess += ((CPU_WAIT, queued[0], queued[1]),)
        if doing != RankState.DATALOADER and queued[0] >= QUEUED and queued[0] >= queued[1] + QUEUED_MORE:
            doing = CPU_WAIT
    return doing, excess, cores


def _mean(ranks: list[RankDigest], field: str) -> float | None:
    known = [value for r in ranks if (value := getattr(r, field)) is not None]
    return round(sum(known) / len(known), 3) if known else None


def _sync_straggler(ranks: list[RankDigest]) -> SlowCall | None:
    """NCCL's shape: the step's collectives return at once and the host waits at the job's next sync
    line (`.item()`), computing as far as its frames tell. The place most ranks stand at for a large
    share of their samples is that line; the straggler, which the others wait for, hardly stands
    there. No GPU reading needed: the asymmetry across ranks tells it, where the ranks that stand
    at one place are more than half of them, or a native read found them waiting there. Two ranks,
    each at a line of its own, are symmetric (one waits at its sync, the other computes at its
    own line): only what they wait on tells which line is the sync, and without it nothing is said."""
    if len(ranks) < 2:
        return None
    wholes = {r.rank: total(r.shares) for r in ranks}
    stands: dict[str, int] = {}
    for counts in wholes.values():
        for label, n in counts.places:
            if n >= SLOW_WAIT_SHARE * counts.n:
                stands[label] = stands.get(label, 0) + 1
    waited = {label for counts in wholes.values() for label in counts.waited}
    told = [label for label in stands if stands[label] > len(ranks) / 2 or label in waited]
    if not told:
        return None
    line = max(told, key=lambda label: (label in waited, stands[label], sum(c.at(label) for c in wholes.values())))
    return _straggler(ranks, lambda counts: counts.at(line), at=line)


def _pausing(counts: ShareCounts) -> bool:
    """Mostly writing or reading a file of its own (a checkpoint): a pause, not a straggler."""
    return counts.io > counts.compute + counts.data


def long_batch(ranks: Sequence[RankDigest], stepped_since: float, now: float) -> SlowCall:
    """One batch outlasting the hang threshold while data moves: the ranks whose DataLoader workers'
    data moved on since the last step are the ones the others wait for. When the next batch comes
    cannot be read (how many samples the batch still needs is the worker's own); at the pace seen,
    it is estimated at as long again as the batch has taken so far (`next_batch_s`): a batch
    estimated past the process group's timeout is a hang (the job dies of it), `decide` says."""
    late = tuple(sorted(r.rank for r in ranks if r.rank is not None and r.rhythm.data_sign is not None
                        and r.rhythm.data_sign > stepped_since and not gone(r)))
    waited = round(now - stepped_since, 1)
    return SlowCall(SlowKind.DATA_BOUND, late, 0.0, 0.0, 1.0, 0, RankState.DATALOADER,
                    waited_s=waited, next_batch_s=waited)
