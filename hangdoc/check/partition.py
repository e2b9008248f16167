"""What each rank's and each DataLoader worker's share of the data weighs (the split itself is
`hangdoc/base/partition.py`, shared with the live uneven-shards rule)."""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from hangdoc.check.model import Partition, RankShare, WorkerShare
from hangdoc.base.partition import Assignment



@dataclass(frozen=True)
class Unit:
    """What one shard (or one raw-list line) weighs in the partition."""

    utterances: int
    bytes: int
    dataset: str
    compression: str


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
