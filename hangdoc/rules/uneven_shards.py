"""uneven-shards: a rank ran out of data and left the epoch while the others still step."""
from __future__ import annotations

from hangdoc.analyze.classify import JOIN_ALL_REDUCE, JOIN_EXIT
from hangdoc.base.partition import classic_split
from hangdoc.base.cmdline import data_list
from hangdoc.model import Cause, DataListCopy, Finding, OpenFile, Role, Severity, Verdict
from hangdoc.rules.snippets import JOIN_SNIPPET
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import live_workers
from hangdoc.rules.samples import basename, frames_line, latest_frames, samples_of
from hangdoc.base.words import mb, plural

# Where a rank that left its data loop waits: the end-of-epoch sync, Join, the next epoch's start.
LEFT_LOOP = ("barrier", "monitored_barrier", JOIN_EXIT, JOIN_ALL_REDUCE)
# What ranks still in the epoch wait in: the step's gradient collective (or the sync NCCL hides behind).
_STEP = ("all_reduce", "reduce_scatter", "all_gather", "synchronize")
_NEXT_EPOCH = ("_share_dist_seed", "_get_iterator", "DataLoader.__iter__")
# Where only a rank that left its loop waits (a barrier may sit inside the loop too).
_JOINED = (JOIN_EXIT, JOIN_ALL_REDUCE)


def _left(view, frames) -> bool:
    if view.reading.detail in LEFT_LOOP:
        return True
    return _next_epoch(view, frames)


def _next_epoch(view, frames) -> bool:
    return view.reading.detail == "broadcast" and any(f.name.endswith(_NEXT_EPOCH) for f in frames)


def _data_reads(ctx: Context, pid: int, since: float | None = None) -> list[tuple[OpenFile, ...]]:
    """The files `pid` held open for reading in each of its full /proc reads (since `since`)."""
    return [tuple(f for f in s.proc.open_files if f.mode == "r") for t, s in samples_of(ctx.bundle, pid)
            if s.alive and s.proc is not None and s.proc.full and (since is None or t >= since)]


def _read_files(ctx: Context, pids) -> bool:
    return any(files for pid in pids for files in _data_reads(ctx, pid))


def _ran_out(ctx: Context, view, frames, stepping) -> bool:
    """Positive evidence that the rank's data is file-backed and its share is read, not just a
    barrier on its stack (a rank that syncs inside its loop, or reads from memory, waits there too).

    The stack shows it left the loop (Join, the next epoch's iterator starting) and the job reads
    files; or the rank and its workers hold no data file in any read since it stopped stepping,
    while they held one earlier or the ranks still stepping hold theirs."""
    rank_pid = view.info.pid
    everyone = [rank_pid] + [w.pid for w in ctx.workers_of(rank_pid)]
    peers = [pid for other in stepping for pid in [other.info.pid] + [w.pid for w in ctx.workers_of(other.info.pid)]]
    if view.reading.detail in _JOINED or _next_epoch(view, frames):
        return _read_files(ctx, everyone + peers) or bool(data_list(view.info.cmdline))
    now = [rank_pid] + [w.pid for w in live_workers(ctx, rank_pid)]
    recent = [files for pid in now for files in _data_reads(ctx, pid, view.blocked_since)]
    if not recent or any(recent):
        return False
    return _read_files(ctx, everyone) or any(_open_shards(ctx, other.info.pid) for other in stepping)


def _open_shards(ctx: Context, rank_pid: int) -> list[str]:
    """The data files the rank's workers hold open in their last full read (logs and pipes aside)."""
    lines = []
    for worker in live_workers(ctx, rank_pid):
        sample = next((s for _, s in reversed(samples_of(ctx.bundle, worker.pid)) if s.proc and s.proc.full), None)
        if sample is None:
            continue
        for f in sample.proc.open_files:
            if f.mode == "r":
                share = f" ({100 * f.pos / f.size:.0f}%)" if f.size else ""
                size = f" of {mb(f.size)}" if f.size else ""
                lines.append(f"{basename(f.path)} at {mb(f.pos)}{size}{share}")
    return lines


def _copy_of(ctx: Context, listing: str | None) -> DataListCopy | None:
    if not listing:
        return None
    name = listing.rstrip("/").rsplit("/", 1)[-1]
    return next((c for c in ctx.bundle.data_lists if c.path.endswith("/" + name) or c.path == listing), None)


def _partition_lines(copy: DataListCopy, world: int, workers: int) -> list[str]:
    """How the classic split `shards[rank::W][worker::K]` shares the list out, rank by rank."""
    n, readers = len(copy.entries), world * workers
    split = classic_split(n, world, workers)
    more = " (first entries only)" if copy.truncated else ""
    lines = [f"{copy.path} lists {n} {copy.kind} entries{more} for {plural(world, 'rank')} x {plural(workers, 'worker')} = "
             f"{readers} readers: " + ("a multiple, equal counts" if n % readers == 0
                                       else f"{n} % {readers} = {n % readers}, so some readers get one less")]
    for rank, shares in enumerate(split):
        count = sum(len(w) for w in shares)
        size = sum(copy.sizes[i] or 0 for w in shares for i in w)
        per_worker = ", ".join(f"w{k} {len(w)}" for k, w in enumerate(shares))
        weight = f", {mb(size)}" if size else ""
        lines.append(f"  rank {rank}: {count} entries{weight} ({per_worker})")
    return lines


def check(ctx: Context) -> list[Finding]:
    d = ctx.diagnosis
    if d.verdict != Verdict.HANG or len(d.mismatch) < 2:
        return []
    stepping = [v for v in d.waiting if v.info.rank not in d.culprits
                and any(s in (v.reading.detail or "") for s in _STEP) and v.reading.detail not in LEFT_LOOP]
    if not stepping:
        return []
    left = [v for v in ctx.culprit_views()
            if _left(v, frames := latest_frames(ctx.bundle, v.info.pid)) and _ran_out(ctx, v, frames, stepping)]
    if not left:
        return []
    common = stepping[0].reading.detail
    others = ", ".join(str(v.info.rank) for v in stepping)
    world = d.ranks[0].info.world_size or d.count(d.ranks)
    workers = max((w.num_workers for w in ctx.bundle.job.by_role(Role.WORKER) if w.num_workers), default=None)
    if workers is None:
        workers = max((len(live_workers(ctx, v.info.pid)) for v in d.ranks), default=0) or None
    findings = []
    for view in left:
        rank = view.info.rank
        frames = latest_frames(ctx.bundle, view.info.pid)
        caller = next((f for f in frames if not f.short_filename.startswith("torch/")), None)
        where = f", called from {caller.label}" if caller else ""
        evidence = [f"rank {rank} waits in {view.reading.detail}{where}, while rank(s) {others} wait in "
                    f"{common} for the next step"]
        stack = frames_line(ctx.bundle, view.info.pid)
        if stack:
            evidence.append(f"rank {rank} stack: {stack}")
        mine = _open_shards(ctx, view.info.pid)
        evidence.append(f"rank {rank}'s DataLoader workers hold " +
                        (f"open: {', '.join(mine)}" if mine else "no data file open: their share is used up"))
        for other in stepping:
            theirs = _open_shards(ctx, other.info.pid)
            if theirs:
                evidence.append(f"rank {other.info.rank}'s workers hold open: {', '.join(theirs)}")
        listing = data_list(view.info.cmdline)
        split = (f"{plural(world, 'rank')} x {plural(workers, 'worker')} = {world * workers}" if workers
                 else plural(world, "rank"))
        copy = _copy_of(ctx, listing)
        if copy is not None and workers:
            evidence.extend(_partition_lines(copy, world, workers))
        elif listing:
            evidence.append(f"the job's data list is {listing} (it could not be read at capture time); "
                            f"shards are split over {split}")
        fix = f"{RULE.fix} Here: {split} readers"
        if workers:
            target = listing or "DATA_LIST"
            fix += (f"; check the list with `hangdoc check data {target} --world-size {world} "
                    f"--num-workers {workers}`.")
        else:
            fix += "."
        findings.append(finding(
            RULE, [rank],
            f"Rank {rank} left the data loop early: it waits in {view.reading.detail} while rank(s) {others} "
            f"still wait in {common}",
            evidence, fix,
        ))
    return findings


RULE = Rule(
    slug="uneven-shards",
    title="A rank ran out of data and left the epoch before the others",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a collective mismatch where the ranks that left wait in a barrier, Join, or the "
            "next epoch's DataLoader seed broadcast while the others wait in the training step's "
            "collective, and the rank's data is read from files and used up (it and its workers held "
            "data files earlier, or the others still do, and it holds none since it stopped); a barrier "
            "alone is not enough. Cites the shards each rank's workers still hold and the data list.",
    fix='Make the shard count a multiple of world_size x num_workers with equal-sized shards, or make the'
        " ranks stop together: WeNet's join (a monitored_barrier on a gloo group with a short timeout) or"
        ' torch.distributed.algorithms.Join around the epoch loop.',
    snippet=JOIN_SNIPPET,
    commands=("watch", "report", "run", "check"),
    causes=frozenset({Cause.DATA}),
)
