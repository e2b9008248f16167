"""missing-ranks: the bundle holds fewer ranks than the job's world size (nodes not captured)."""
from __future__ import annotations

from hangdoc.base.parse import to_int
from hangdoc.base.words import rank_ranges, rank_set
from hangdoc.model import Finding, Job, Severity
from hangdoc.rules.base import Context, Rule, finding

FIX = ("Capture every node of the job at about the same moment and merge the bundles: "
       "`srun --overlap --jobid=$JOB --ntasks-per-node=1 hangdoc watch --job --once --out $DIR/<host>.json` "
       "(or kubectl exec / pdsh on each node; docs/cluster.md), then `hangdoc report $DIR`.")


def missing(job: Job) -> tuple[int, list[int], list[int] | None]:
    """(world size, ranks missing, node group ranks missing or None when the node count is unknown)."""
    ranks = job.ranks
    sizes = [job.world_size] + [p.world_size for p in ranks]
    world = max((s for s in sizes if s), default=0)
    present = {p.rank for p in ranks if p.rank is not None}
    if not world or not present:
        return world, [], None
    absent = [r for r in range(world) if r not in present]
    nodes = max((n for p in ranks if (n := to_int(p.env.get("GROUP_WORLD_SIZE")))), default=None)
    groups = {p.group_rank for p in ranks if p.group_rank is not None}
    absent_nodes = [g for g in range(nodes) if g not in groups] if nodes and groups else None
    return world, absent, absent_nodes


def check(ctx: Context) -> list[Finding]:
    job = ctx.bundle.job
    if job.single_process:
        return []
    census = ctx.diagnosis.census
    if census is None:
        world, absent, absent_nodes = missing(job)
        present = [p.rank for p in job.ranks if p.rank is not None]
        hosts = sorted({p.host or ctx.bundle.host.hostname for p in job.ranks})
        groups = sorted({p.group_rank for p in job.ranks if p.group_rank is not None})
    else:   # a job diagnosed by class: the bundle holds one node of each class, the census all
        present, hosts, groups = list(census.ranks), list(census.hosts), list(census.group_ranks)
        world = max([job.world_size or 0, len(present)])
        have = set(present)
        absent = [r for r in range(world) if r not in have]
        have_groups = set(groups)
        absent_nodes = ([g for g in range(census.nodes) if g not in have_groups]
                        if census.nodes and groups else None)
    if not absent:
        return []
    where = f" on {', '.join(hosts[:8])}{' ...' if len(hosts) > 8 else ''}"
    if groups:
        where += f" (node {rank_ranges(groups)})"
    nodes = f" (node {rank_ranges(absent_nodes)} not captured)" if absent_nodes else ""
    evidence = [f"{len(present)} of {world} ranks captured: {rank_set(present)}{where}",
                f"not in the bundle: {rank_set(absent)}{nodes}"]
    d = ctx.diagnosis
    verb = "is" if len(absent) == 1 else "are"
    title = f"{rank_set(absent).capitalize()} of {world} {verb} not in the bundle{nodes}"
    severity = Severity.INFO if d.verdict == "healthy" else Severity.WARNING
    if d.verdict == "hang" and not d.culprits and d.waiting:
        title += ": every rank here waits in a collective, so the culprit is on another node"
        evidence.append(f"{d.count(d.waiting)} of {d.count(d.ranks)} captured ranks wait in "
                        f"{d.waiting[0].reading.detail or 'a collective'}: the rank they wait for is not here")
    return [finding(RULE, absent, title, evidence, severity=severity)]


RULE = Rule(
    slug="missing-ranks",
    title="The bundle holds only some of the job's ranks",
    severity=Severity.WARNING,
    check=check,
    summary="Fires when the bundle has fewer ranks than the job's world size: a multi-node job "
            "captured on some nodes only. Names the missing ranks and nodes (group ranks); when every "
            "captured rank waits in a collective, the culprit is among the missing ones.",
    fix=FIX,
)
