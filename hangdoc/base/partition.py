"""Which shards each rank and each DataLoader worker reads: pure arithmetic, one home for it.

Two orders are modelled. The classic split, as WeNet and most hand-written
IterableDatasets do it, is `shards[rank::W][worker::K]`. torch's DataLoader sharding
(`sharding_filter` under `_sharding_worker_init_fn`) gives global worker
`worker * W + rank` every `W * K`-th shard. Both hand shard i to rank i % W and
worker (i // W) % K; the two are computed independently so the claim stays tested.
`hangdoc check data` and the live uneven-shards rule both split with these.
"""
from __future__ import annotations

Assignment = tuple[tuple[tuple[int, ...], ...], ...]   # [rank][worker] -> shard indices


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
