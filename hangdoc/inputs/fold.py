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
import operator
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
        self._before: tuple[RankDigest, ...] = ()     # the ranks of the node read last

    def __call__(self, value):
        return self._seen.setdefault(value, value)

    def ranks(self, digest: NodeDigest) -> None:
        """Each rank of `digest` made to hold the shared copies of its parts (in place: the digest
        was just decoded and nothing else holds it yet).

        A rank's workers and rhythm are first held against the rank at its place on the node read
        last (containers: the same workers on every node), its rhythm then against the rank before
        it here: equal, that copy is taken, and they are not hashed (eight workers a rank: most of
        the time a million ranks took to share)."""
        put = msgspec.structs.force_setattr
        one = self._seen.setdefault
        before, here = self._before, digest.ranks
        for i, rank in enumerate(here):
            was = before[i] if i < len(before) else None
            near = here[i - 1] if i else None
            workers, rhythm = rank.workers, rank.rhythm
            if was is not None and was.workers == workers:
                put(rank, "workers", was.workers)
            else:
                put(rank, "workers", one(workers, workers))
            if near is not None and near.rhythm == rhythm:
                put(rank, "rhythm", near.rhythm)
            elif was is not None and was.rhythm == rhythm:
                put(rank, "rhythm", was.rhythm)
            else:
                put(rank, "rhythm", one(rhythm, rhythm))
            put(rank, "host", one(rank.host, rank.host))
            put(rank, "top_frame", one(rank.top_frame, rank.top_frame))
            put(rank, "stack_key", one(rank.stack_key, rank.stack_key))
            put(rank, "state", one(rank.state, rank.state))
        self._before = here


def read_node(path: Path, shared: Shared | None = None) -> NodeRead:
    """The node's head when its digest is current; otherwise the whole bundle, digested here.
    `shared`: the parts already read of the job's other nodes, held once (`Shared`)."""
    head = load_head(path)
    if head is not None and head.digest is not None and head.digest.version == DIGEST_VERSION:
        b = head.bundle
        check_distributed(b.job, str(path))
        if shared is not None:
            shared.ranks(head.digest)
        ranks = head.digest.ranks
        job = JobId(b.job.run_id, b.job.master_addr, b.job.master_port, b.job.world_size,
                    tuple(map(_NUMBER, ranks)), tuple(map(_STARTED, ranks)))
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
    # By rank, the ranks without a number last: each class's first is its lowest rank.
    numbered = _by_number(ranks)
    unnumbered = [r for r in ranks if r.rank is None] if len(numbered) < len(ranks) else []
    classes = _classes(numbered + unnumbered, alone)
    heads = {(members[0].host, members[0].pid): members for members in classes.values()}
    first = {id(members[0]) for members in classes.values()}
    chosen = sorted((n for n in nodes if not first.isdisjoint(map(id, n.digest.ranks))), key=lambda n: str(n.path))
    bundle = merge_bundles([load_bundle(n.path) for n in chosen], [str(n.path) for n in chosen])
    if records:
        bundle = dataclasses.replace(bundle, flight_records=bundle.flight_records + records)

    views = []
    for view in rank_views(bundle, timelines(bundle)):
        members = heads.get((view.info.host or bundle.host.hostname, view.info.node_pid))
        if members is not None:
            views.append(dataclasses.replace(view, members=_numbers(members)))
    return bundle, diagnosis_of(decision, facts.now, views, census=census(nodes, ranks, numbered))


_NUMBER, _STARTED = operator.attrgetter("rank"), operator.attrgetter("started")


def _by_number(ranks: list[RankDigest]) -> list[RankDigest]:
    """The ranks that have a number, sorted by it. A torchrun job's ranks all have one: they are
    sorted as they are, and picked out first only where the sort met a rank without (it compares
    every rank of two or more)."""
    try:
        numbered = sorted(ranks, key=_NUMBER)
        if len(numbered) > 1 or all(r.rank is not None for r in numbered):
            return numbered
    except TypeError:       # None met a number, or None
        pass
    return sorted((r for r in ranks if r.rank is not None), key=_NUMBER)


def _numbers(members: list[RankDigest]) -> tuple[int, ...]:
    numbers = tuple(map(_NUMBER, members))
    if numbers and numbers[-1] is None:     # ranks without a number come last in a class
        numbers = tuple(r for r in numbers if r is not None)
    return numbers


def _classes(ranks: list[RankDigest], alone: set[int]) -> dict[tuple, list[RankDigest]]:
    """The ranks (in the order given) by class, a rank in `alone` by itself. Ranks of a class read
    alike: the same state, stack, progress and workers (not times, pids, hosts). The key is built
    here, not by a call a rank (a million ranks are a million keys), and the workers' part once a
    workers tuple: the ranks of a job's nodes share them (`Shared`)."""
    classes: dict[tuple, list[RankDigest]] = {}
    # The workers' part of a key: a number for each way workers read, looked up by the identity of
    # a workers tuple (every rank is held by the caller: no tuple's id is reused).
    readings: dict[tuple, int] = {}
    workers_read: dict[int, int] = {}
    for rank in ranks:
        if rank.rank in alone:
            key = (rank.rank,)
        else:
            workers = workers_read.get(id(rank.workers))
            if workers is None:
                reading = tuple([(w.state, w.top_frame, w.alive) for w in rank.workers])
                workers = workers_read[id(rank.workers)] = readings.setdefault(reading, len(readings))
            key = (rank.state, rank.detail, rank.top_frame, rank.stack_key, rank.progress, rank.exited_at is None,
                   workers)
        found = classes.get(key)
        if found is None:
            classes[key] = [rank]
        else:
            found.append(rank)
    return classes


def census(nodes: Sequence[NodeRead], ranks: Sequence[RankDigest], numbered: Sequence[RankDigest]) -> Census:
    """Every rank of the job: `ranks`, every node's, and `numbered`, those with a number, sorted by it."""
    return Census(ranks=tuple(map(_NUMBER, numbered)), every=ranks,
                  nodes=max((n.digest.group_world_size for n in nodes if n.digest.group_world_size), default=None))
