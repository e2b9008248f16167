"""gpu-starved: no hang, but the ranks spend most of their time waiting for data."""
from __future__ import annotations

from collections import Counter

from hangdoc.base.words import plural
from hangdoc.model import Cause, Finding, Severity, SlowKind, Verdict
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import MIN_SAMPLES, STARVED_SHARE, data_shares, live_workers, worker_habit

BUSY_GPU_PCT = 80        # GPUs this busy on average are not starved, whatever the ranks show
IDLE_GPU_PCT = 10
WAITING_WORKER = 0.5     # workers busy less than half a core on average wait (I/O, a remote store)


def _gpu_lines(ctx: Context) -> tuple[list[str], float | None]:
    """One line per GPU a rank uses (mean utilisation, idle samples) and the mean over them all."""
    ranks = {p.pid: p.rank for p in ctx.bundle.job.ranks}
    util: dict[tuple[int, int | None], list[int]] = {}
    for snap in ctx.bundle.samples:
        if not snap.gpu.available:
            continue
        for device in snap.gpu.devices:
            users = [ranks[p.pid] for p in device.processes if p.pid in ranks]
            if device.utilization_pct is not None and users:
                util.setdefault((device.index, min(users)), []).append(device.utilization_pct)
    lines = []
    for (index, rank), values in sorted(util.items()):
        idle = sum(v < IDLE_GPU_PCT for v in values)
        lines.append(f"GPU{index} (rank {rank}): mean {sum(values) / len(values):.0f}% utilisation, "
                     f"below {IDLE_GPU_PCT}% in {idle} of {len(values)} samples, peak {max(values)}%")
    every = [v for values in util.values() for v in values]
    return lines, (sum(every) / len(every) if every else None)


def check(ctx: Context) -> list[Finding]:
    if ctx.diagnosis.verdict not in (Verdict.HEALTHY, Verdict.SLOW):
        return []
    slow = ctx.diagnosis.slow
    if slow is not None and slow.kind == SlowKind.STRAGGLER:
        return []    # not the job's data but one rank's: slow-rank names it, the data rules say why
    shares = [s for s in data_shares(ctx) if s[2] >= MIN_SAMPLES]
    starved = [s for s in shares if s[1] / s[2] >= STARVED_SHARE]
    if not starved:
        return []
    gpu_lines, gpu_mean = _gpu_lines(ctx)
    if gpu_mean is not None and gpu_mean >= BUSY_GPU_PCT:
        return []
    evidence = [f"rank {rank}: waiting in DataLoader.__next__ in {waiting} of {alive} samples "
                f"({100 * waiting / alive:.0f}%)" for rank, waiting, alive in shares]
    if gpu_lines:
        evidence += gpu_lines
    else:
        gpu = next((s.gpu for s in reversed(ctx.bundle.samples)), None)
        why = f" ({gpu.reason})" if gpu is not None and gpu.reason else ""
        evidence.append(f"GPU data unavailable{why}: judged on the dataloader-wait share alone")
    nranks = len(ctx.bundle.job.ranks)
    # The workers each rank has now: an epoch's workers end and new ones are forked, and every
    # worker ever seen would count them over again.
    current = {r.pid: live_workers(ctx, r.pid) for r in ctx.bundle.job.ranks}
    per_rank = [len(current[r.pid]) for r in ctx.bundle.job.ranks]
    workers = max(per_rank, default=0)
    cores = ctx.bundle.host.cpu_count
    if len(set(per_rank)) <= 1:
        evidence.append(f"{plural(workers, 'DataLoader worker')} per rank x {plural(nranks, 'rank')} = "
                        f"{plural(sum(per_rank), 'worker')} on a {cores}-core host")
    else:
        counts = ", ".join(f"rank {r.rank} {n}" for r, n in zip(ctx.bundle.job.ranks, per_rank))
        evidence.append(f"DataLoader workers: {counts} = {sum(per_rank)} workers on a {cores}-core host")
    busy, lines = [], Counter()
    for rank in ctx.bundle.job.ranks:
        for worker in current[rank.pid]:
            habit = worker_habit(ctx.bundle, worker)
            if habit is not None:
                busy.append(habit.busy)
                evidence.append(f"rank {rank.rank} {habit.text}")
                lines.update([habit.line] if habit.line else [])
    room = cores // max(nranks, 1)
    # A rule before this one that named what holds the workers back (their CPUs, a quota) says the fix.
    held = next((f for f in ctx.findings if f.cause), None)
    if held is not None:
        here = (f" Here: what holds the workers back is {held.cause} ({held.rule}): lift that first; "
                "more workers will not help.")
    elif busy and sum(busy) / len(busy) < WAITING_WORKER:
        at = f", most often at {lines.most_common(1)[0][0]}" if lines else ""
        here = (f" Here: the workers use {100 * sum(busy) / len(busy):.0f}% of a core each: they wait{at}, "
                "they do not compute. More workers overlap those waits (a waiting worker needs no core, so "
                "past the core count too); packing the small files into tar shards read in order, or "
                "caching them on a local disk, removes a wait per file.")
    elif room > workers:
        here = f" Here: {plural(workers, 'worker')} per rank and {room} cores per rank: try num_workers={room}."
    else:
        here = (f" Here: {plural(workers, 'worker')} per rank {'already uses' if workers == 1 else 'already use'} "
                f"the {cores} cores; more workers will "
                "not help: make each sample cheaper (cache features, pack short clips into shards).")
    ranks = [rank for rank, _, _ in starved]
    low, high = min(w / a for _, w, a in starved), max(w / a for _, w, a in starved)
    span = f"{100 * low:.0f}%" if round(100 * low) == round(100 * high) else f"{100 * low:.0f}-{100 * high:.0f}%"
    return [finding(
        RULE, ranks,
        f"Not a hang, but starved: rank(s) {', '.join(map(str, ranks))} wait for data in {span} of samples",
        evidence, RULE.fix + here,
    )]


RULE = Rule(
    slug="gpu-starved",
    title="The GPUs wait for data (not a hang)",
    severity=Severity.WARNING,
    check=check,
    summary="Fires on a job that is not hung when ranks spend at least half their samples waiting "
            "in DataLoader.__next__ (and the GPUs, when NVML was read, are not busy; not for a slow job's "
            "straggler, which slow-rank names); gives the share per rank, GPU utilisation, the worker count "
            "against the cores, how busy each worker is and at which line, and whether more workers help.",
    fix='Raise num_workers (past the cores per rank only when the workers wait rather than compute), use '
        'larger batches and prefetch_factor, pack small clips into tar shards, or cache features.',
    commands=("watch", "report", "run", "check"),
    causes=frozenset({Cause.DATA}),
)
