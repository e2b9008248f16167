"""Hang, crash, suspect or healthy, and who everyone is waiting for: a pure function of the bundle.

The verdict is `hang` once no rank has stepped (its own loop moved on, `analyze/progress.py`)
nor done I/O of its own for the threshold (given, or learned from the job's step rhythm),
while some rank waits in a collective or nothing moves at all. The culprits are the ranks
outside the majority's collective (a straggler), or the ranks in a different collective
(a mismatch). `suspect`: the ranks are split (some wait in a collective for the others) and
the bundle cannot show them moving: one instant, or quiet for a third of the threshold.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from hangdoc.analyze.classify import Reading
from hangdoc.analyze.flight import fr_step_times
from hangdoc.analyze.logs import failed_worker_rank, killed_workers, says_failure, torchrun_root_cause
from hangdoc.analyze.progress import Rhythm, blocked_since, progress_word, rhythm
from hangdoc.analyze.timeline import Timeline, timelines
from hangdoc.model import Bundle, ProcessInfo, Role

# Collectives on the common path of a training step: the rank elsewhere left that path.
CRASH_GRACE_S = 5.0
_STEP_COLLECTIVES = ("all_reduce", "DDP gradient all_reduce (backward)", "reduce_scatter",
                     "reduce_scatter_tensor", "all_gather_into_tensor", "cuda synchronize")


@dataclass(frozen=True)
class RankView:
    info: ProcessInfo
    reading: Reading
    state_since: float
    blocked_since: float | None
    progress: str
    workers: tuple[tuple[ProcessInfo, Reading, bool], ...]   # (worker, reading, alive)
    exited_at: float | None


@dataclass(frozen=True)
class Diagnosis:
    verdict: str                       # "hang", "crash", "suspect", "healthy" or "ended" (cause unknown)
    culprits: tuple[int, ...]
    onset: float | None
    decided_at: float
    ranks: tuple[RankView, ...]
    mismatch: dict[str, tuple[int, ...]] = field(default_factory=dict)  # collective -> ranks
    frozen: bool = False               # a hang outside collectives: nothing moved at all
    rhythm: Rhythm | None = None       # how the threshold was set, and since when nothing stepped

    def view(self, rank: int) -> RankView | None:
        return next((r for r in self.ranks if r.info.rank == rank), None)

    @property
    def waiting(self) -> tuple[RankView, ...]:
        return tuple(r for r in self.ranks if r.reading.state == "collective-wait")


def diagnose(bundle: Bundle, hang_after: float | None = None) -> Diagnosis:
    """`hang_after` overrides the bundle's own; with neither, the threshold is learned."""
    hang_after = hang_after if hang_after is not None else bundle.options.hang_after_s
    lines = timelines(bundle)
    now = bundle.last.time
    views = []
    for rank in bundle.job.ranks:
        line = lines.get(rank.pid)
        if line is None:
            continue
        workers = [w for w in bundle.job.children_of(rank.pid) if w.role is Role.WORKER]
        worker_lines = [lines[w.pid] for w in workers if w.pid in lines]
        worker_states = tuple(
            (w, lines[w.pid].last.reading, lines[w.pid].last.reading.state != "exited")
            for w in workers if w.pid in lines
        )
        exited_at = next((p.time for p in line.points if p.reading.state == "exited"), None)
        views.append(RankView(rank, line.last.reading, line.state_since(), blocked_since(line),
                              progress_word(line, worker_lines), worker_states, exited_at))
    rank_lines = [lines[v.info.pid] for v in views]
    beat = rhythm(rank_lines, bundle.samples[0].time, hang_after, fr_step_times(bundle.flight_records))

    def verdict(name: str, culprits=(), onset=None, mismatch=None, frozen=False) -> Diagnosis:
        return Diagnosis(name, tuple(culprits), onset, now, tuple(views), mismatch or {}, frozen, beat)

    crash = _crash(bundle, views, now)
    if crash is not None:
        return verdict("crash", crash[0], crash[1])
    if views and all(v.exited_at is not None for v in views):
        return verdict("healthy" if ended_readably(bundle) else "ended")
    if not views and bundle.exit_code not in (None, 0):
        return verdict("crash")

    quiet = now - beat.quiet_since
    culprits, mismatch = _culprits(views)
    waiting = any(v.exited_at is None and v.reading.state == "collective-wait" for v in views)
    split = bool(mismatch) or (waiting and bool(culprits))
    if quiet >= beat.threshold_s and waiting:
        return verdict("hang", culprits, beat.quiet_since, mismatch)
    frozen = _all_frozen(lines, views, now, beat)
    if frozen is not None:
        return verdict("hang", (v.info.rank for v in views if v.info.rank is not None), frozen, frozen=True)
    if split and (len(bundle.samples) == 1 or quiet >= beat.threshold_s / 3):
        return verdict("suspect", culprits, beat.quiet_since, mismatch)
    return verdict("healthy")


def ended_readably(bundle: Bundle) -> bool:
    """Whether a job whose ranks are all gone left anything that tells a good end from a crash:
    the launcher's exit code, or its output (where a crash leaves a traceback or torchrun's
    failure summary). Ranks vanishing with neither (output on a terminal, a launcher that is not
    hangdoc's child) are "ended, cause unknown", never "healthy"."""
    return bundle.exit_code == 0 or any(line.strip() for tail in bundle.logs for line in tail.lines)


def _crash(bundle: Bundle, views: list[RankView], now: float) -> tuple[tuple[int, ...], float | None] | None:
    """(culprit ranks, onset) when the job crashed, None when it did not (or not yet)."""
    exited = sorted((v for v in views if v.exited_at is not None), key=lambda v: v.exited_at)
    if not exited:
        return None
    failed = bundle.exit_code not in (None, 0) or (bundle.exit_code is None and says_failure(bundle.logs))
    some_alive = len(exited) < len(views)
    # Ranks of a job that ends well exit together; one gone for long while others live is a crash.
    if not failed and not (some_alive and now - exited[0].exited_at >= CRASH_GRACE_S):
        return None
    root = torchrun_root_cause(bundle.logs)
    if root is not None:
        return (root.rank,), exited[0].exited_at
    dead_workers = killed_workers(bundle.logs)
    for worker in bundle.job.by_role(Role.WORKER):
        if worker.pid in dead_workers and worker.rank is not None:
            return (worker.rank,), exited[0].exited_at
    if (rank := failed_worker_rank(bundle.logs)) is not None:   # the worker died before we saw it
        return (rank,), exited[0].exited_at
    first = [v.info.rank for v in exited if v.exited_at == exited[0].exited_at and v.info.rank is not None]
    return (tuple(first) if some_alive else ()), exited[0].exited_at


def _all_frozen(lines: dict[int, Timeline], views: list[RankView], now: float, beat: Rhythm) -> float | None:
    """No rank stepped and no rank or worker moved (frames, CPU, bytes) for the threshold: frozen
    outside any collective (a deadlock, a lone process asleep). Returns when the freeze began."""
    if not views or any(v.reading.state in ("collective-wait", "exited", "unknown") for v in views):
        return None
    pids = [v.info.pid for v in views] + [w.pid for v in views for w, _, alive in v.workers if alive]
    since = [lines[pid].unmoved_since() for pid in pids if pid in lines]
    if len(lines[views[0].info.pid].points) < 3 or not since:
        return None
    start = max(max(since), beat.quiet_since)
    return start if now - start >= beat.threshold_s else None


def _culprits(views: list[RankView]) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
    waiting = [v for v in views if v.reading.state == "collective-wait"]
    others = [v for v in views if v.reading.state != "collective-wait"]
    if others and waiting:
        return tuple(sorted(v.info.rank for v in others if v.info.rank is not None)), {}
    groups: dict[str, list[int]] = defaultdict(list)
    for view in waiting:
        groups[view.reading.detail or "?"].append(view.info.rank)
    if len(groups) < 2:
        return (), {}
    mismatch = {name: tuple(sorted(r)) for name, r in groups.items()}

    def common_path(item: tuple[str, list[int]]) -> tuple[int, int]:
        name, ranks = item
        return len(ranks), int(name in _STEP_COLLECTIVES)

    common = max(groups.items(), key=common_path)[0]
    culprits = sorted(r for name, ranks in groups.items() if name != common for r in ranks)
    return tuple(culprits), mismatch
