"""A job of thousands of nodes diagnosed by class, as LLNL's STAT merges stacks.

Each node's bundle carries its own reading of its ranks (its digest: state, stack key,
progress and the rhythm in a few numbers). `report DIR` reads the digests of every node,
one file at a time, and decides the verdict and the culprits over all ranks at once. Ranks
whose readings are identical (same state, stack, progress and workers) form one class;
only the nodes that hold a class's lowest rank are then loaded whole, so the rules read real
stacks and files for every class, and each row of the report stands for a class with its
rank set. Memory and time grow with the distinct classes, not with the ranks.

A node whose bundle has no digest (v1, or one written by another analysis version) is read
whole and its digest computed here: slower, never wrong.
"""
from __future__ import annotations

import dataclasses
import gc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from hangdoc.analyze.diagnose import Census, Diagnosis, JobFacts, decide, diagnosis_of, node_digest, rank_views
from hangdoc.analyze.flight import fr_pending, fr_step_times
from hangdoc.analyze.timeline import timelines
from hangdoc.bundle.files import load_bundle, load_head
from hangdoc.base.errors import BadBundle
from hangdoc.bundle.merge import JobId, check_distributed, check_one_job, exit_code_of, merge_bundles
from hangdoc.model import DIGEST_VERSION, Bundle, FlightRecord, LogTail, NodeDigest, RankDigest

# Merged jobs up to this many ranks are read whole: every rank gets its own row.
FOLD_ABOVE_RANKS = 64
ALONE_CULPRITS = 64


@dataclass(frozen=True)
class NodeRead:
    """One node as the class diagnosis reads it: its file, identity, logs and digest."""

    path: Path
    host: str
    job: JobId
    logs: tuple[LogTail, ...]
    exit_code: int | None
    hang_after_s: float | None
    interval_s: float | None
    digest: NodeDigest


class Shared:
    """What the digests of a job's nodes hold alike, held once: a rank's workers (the same pids,
    states and frames on every node of a containerised job), its rhythm, and the words of its
    state. A million ranks' digests would otherwise hold eight million workers."""

    def __init__(self) -> None:
        self._seen: dict = {}

    def __call__(self, value):
        return self._seen.setdefault(value, value)

    def ranks(self, digest: NodeDigest) -> None:
        """Each rank of `digest` made to hold the shared copies of its parts (in place: the digest
        was just decoded and nothing else holds it yet)."""
        put = msgspec.structs.force_setattr
        one = self._seen.setdefault
        for rank in digest.ranks:
            put(rank, "workers", one(rank.workers, rank.workers))
            put(rank, "rhythm", one(rank.rhythm, rank.rhythm))
            put(rank, "host", one(rank.host, rank.host))
            put(rank, "top_frame", one(rank.top_frame, rank.top_frame))
            put(rank, "stack_key", one(rank.stack_key, rank.stack_key))
            put(rank, "state", one(rank.state, rank.state))


def read_node(path: Path, shared: Shared | None = None) -> NodeRead:
    """The node's head when its digest is current; otherwise the whole bundle, digested here.
    `shared`: the parts already read of the job's other nodes, held once (`Shared`)."""
    head = load_head(path)
    if head is not None and head.digest is not None and head.digest.version == DIGEST_VERSION:
        b = head.bundle
        check_distributed(b.job, str(path))
        if shared is not None:
            shared.ranks(head.digest)
        ranks = tuple((r.rank, r.started) for r in head.digest.ranks)
        job = JobId(b.job.run_id, b.job.master_addr, b.job.master_port, b.job.world_size, ranks)
        node = NodeRead(path, b.host.hostname, job, b.logs, b.exit_code, b.options.hang_after_s,
                        b.options.interval_s, head.digest)
        # Thousands of nodes are read one after another and kept: the cyclic collector would walk
        # the pile again and again as it grows (a fifth of a 65,536-rank report). Frozen, it is
        # skipped; it holds no cycles, and reference counting still frees it (as load_bundles does).
        gc.freeze()
        return node
    bundle = load_bundle(path)
    if not bundle.samples:
        raise BadBundle(f"{path} holds no sample")
    check_distributed(bundle.job, str(path))
    return NodeRead(path, bundle.host.hostname, JobId.of(bundle), bundle.logs, bundle.exit_code,
                    bundle.options.hang_after_s, bundle.options.interval_s, node_digest(bundle))


def class_key(rank: RankDigest, workers_read: dict[int, tuple] | None = None) -> tuple:
    """Ranks that read alike: the same state, stack, progress and workers (not times, pids, hosts).
    `workers_read`: the workers' part already worked out, by the identity of a workers tuple the
    ranks share (`Shared`)."""
    workers = workers_read.get(id(rank.workers)) if workers_read is not None else None
    if workers is None:
        workers = tuple([(w.state, w.top_frame, w.alive) for w in rank.workers])
        if workers_read is not None:
            workers_read[id(rank.workers)] = workers
    return (rank.state, rank.detail, rank.top_frame, rank.stack_key, rank.progress, rank.exited_at is None, workers)


def diagnose_by_class(nodes: Sequence[NodeRead], hang_after: float | None = None,
                      records: tuple[FlightRecord, ...] = ()) -> tuple[Bundle, Diagnosis]:
    """The job's diagnosis over every node's digest, and the bundle of the nodes that hold each
    class's lowest rank (what the rules read). Views stand for their classes (`RankView.members`)."""
    check_one_job([n.job for n in nodes], [str(n.path) for n in nodes])
    ranks = [r for n in nodes for r in n.digest.ranks]
    given = [n.hang_after_s for n in nodes if n.hang_after_s is not None]
    facts = JobFacts(
        first=min(n.digest.first for n in nodes), now=max(n.digest.last for n in nodes),
        logs=tuple(LogTail(f"{n.host}:{log.source}", log.lines) for n in nodes for log in n.logs),
        exit_code=exit_code_of([n.exit_code for n in nodes]),
        hang_after=hang_after if hang_after is not None else (min(given) if given else None),
        collective_steps=tuple(t for n in nodes for t in n.digest.collective_steps + n.digest.output_steps)
        + tuple(fr_step_times(records)),
        fr_pending=min((p for p in [*(n.digest.fr_pending for n in nodes), fr_pending(records)] if p is not None),
                       key=lambda p: p[0], default=None),
    )
    decision = decide(ranks, facts)

    # A culprit is its own class (its own row, its own findings) unless there are crowds of them.
    alone = set(decision.culprits) if len(decision.culprits) <= ALONE_CULPRITS else set()
    classes: dict[tuple, list[RankDigest]] = {}
    workers_read: dict[int, tuple] = {}     # every rank is held in `ranks`: no tuple's id is reused
    for rank in sorted(ranks, key=lambda r: (r.rank is None, r.rank)):
        key = (rank.rank,) if rank.rank in alone else class_key(rank, workers_read)
        classes.setdefault(key, []).append(rank)
    node_of = {(r.host, r.pid): n for n in nodes for r in n.digest.ranks}
    heads = {(members[0].host, members[0].pid): members for members in classes.values()}
    chosen = sorted({id(node_of[key]): node_of[key] for key in heads}.values(), key=lambda n: str(n.path))
    bundle = merge_bundles([load_bundle(n.path) for n in chosen], [str(n.path) for n in chosen])
    if records:
        bundle = dataclasses.replace(bundle, flight_records=bundle.flight_records + records)

    views = []
    for view in rank_views(bundle, timelines(bundle)):
        members = heads.get((view.info.host or bundle.host.hostname, view.info.node_pid))
        if members is not None:
            views.append(dataclasses.replace(view, members=tuple(r.rank for r in members if r.rank is not None)))
    return bundle, diagnosis_of(decision, facts.now, views, census=census(nodes))


def census(nodes: Sequence[NodeRead]) -> Census:
    ranks = [r for n in nodes for r in n.digest.ranks]
    return Census(
        ranks=tuple(sorted(r.rank for r in ranks if r.rank is not None)),
        hosts=tuple(sorted({r.host for r in ranks})),
        group_ranks=tuple(sorted({r.group_rank for r in ranks if r.group_rank is not None})),
        nodes=max((n.digest.group_world_size for n in nodes if n.digest.group_world_size), default=None),
    )
