"""Which shards each rank and each DataLoader worker reads: pure arithmetic.

Two orders are modelled. The classic split, as WeNet and most hand-written
IterableDatasets do it, is `shards[rank::W][worker::K]`. torch's DataLoader sharding
(`sharding_filter` under `_sharding_worker_init_fn`) gives global worker
`worker * W + rank` every `W * K`-th shard. Both hand shard i to rank i % W and
worker (i // W) % K; the two are computed independently so the claim stays tested.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from hangdoc.check.model import Partition, RankShare, WorkerShare

Assignment = tuple[tuple[tuple[int, ...], ...], ...]   # [rank][worker] -> shard indices


@dataclass(frozen=True)
class Unit:
    """What one shard (or one raw-list line) weighs in the partition."""

    utterances: int
    bytes: int
    dataset: str
    compression: str


def classic_split(n: int, world_size: int, num_workers: int) -> Assignment:
    shards = list(range(n))
    return tuple(
        tuple(tuple(shards[rank::world_size][worker::num_workers]) for worker in range(num_workers))
        for rank in range(world_size)
    )


def torch_split(n: int, world_size: int, num_workers: int) -> Assignment:
    total = world_size * num_workers
    out: list[list[list[int]]] = [[[] for _ in range(num_workers)] for _ in range(world_size)]
    for index in range(n):
        global_worker = index % total
        out[global_worker % world_size][global_worker // world_size].append(index)
    return tuple(tuple(tuple(w) for w in rank) for rank in out)


def owner(index: int, world_size: int, num_workers: int) -> tuple[int, int]:
    """(rank, worker) that reads shard `index` under the classic split."""
    return index % world_size, (index // world_size) % num_workers


def summarize(order: str, assignment: Assignment, units: Sequence[Unit], *,
              batch_size: int | None = None, list_indices: bool = True) -> Partition:
    ranks = []
    for rank, workers in enumerate(assignment):
        shares = []
        datasets: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        kind_bytes: Counter[str] = Counter()
        for worker, indices in enumerate(workers):
            utterances = sum(units[i].utterances for i in indices)
            shares.append(WorkerShare(
                worker=worker,
                indices=indices if list_indices else (),
                items=len(indices),
                utterances=utterances,
                bytes=sum(units[i].bytes for i in indices),
                batches=math.ceil(utterances / batch_size) if batch_size else None,
            ))
            for i in indices:
                datasets[units[i].dataset] += units[i].utterances
                kinds[units[i].compression] += 1
                kind_bytes[units[i].compression] += units[i].bytes
        ranks.append(RankShare(
            rank=rank,
            workers=tuple(shares),
            items=sum(w.items for w in shares),
            utterances=sum(w.utterances for w in shares),
            bytes=sum(w.bytes for w in shares),
            batches=sum(w.batches for w in shares) if batch_size else None,
            dataset_utterances=dict(datasets),
            compression_items=dict(kinds),
            compression_bytes=dict(kind_bytes),
        ))
    num_workers = len(assignment[0]) if assignment else 0
    return Partition(order=order, world_size=len(assignment), num_workers=num_workers, ranks=tuple(ranks))
