"""The partition arithmetic: which shards each rank and DataLoader worker reads."""
from __future__ import annotations

import itertools

import pytest

from hangdoc.check.partition import Unit, summarize
from hangdoc.base.partition import classic_split, owner, torch_split


def test_seven_shards_over_2_ranks_x_2_workers_follow_shards_rank_w_worker_k():
    # GIVEN 7 shards, W=2, K=2 WHEN split THEN each worker's list is shards[rank::2][worker::2]
    assert classic_split(7, 2, 2) == (((0, 4), (2, 6)), ((1, 5), (3,)))


@pytest.mark.parametrize("n, w, k", list(itertools.product(range(0, 30), range(1, 5), range(1, 4))))
def test_torch_sharding_order_hands_out_the_same_shards_as_the_classic_split(n, w, k):
    # global worker = worker * W + rank, round robin: the same shards, in the same order
    assert torch_split(n, w, k) == classic_split(n, w, k)


def test_owner_names_the_rank_and_worker_of_every_shard():
    split = classic_split(23, 3, 4)
    for index in range(23):
        rank, worker = owner(index, 3, 4)
        assert index in split[rank][worker]


def test_summarize_counts_utterances_bytes_batches_and_the_share_of_each_dataset():
    # GIVEN 5 shards from two lists, one of them bz2
    units = [Unit(10, 100, "a", "none"), Unit(10, 100, "a", "none"), Unit(7, 90, "b", "bz2"),
             Unit(10, 100, "a", "none"), Unit(3, 30, "b", "none")]
    # WHEN split over 2 ranks x 1 worker with batches of 4
    part = summarize("classic", classic_split(5, 2, 1), units, batch_size=4)
    r0, r1 = part.ranks
    # THEN rank 0 reads shards 0, 2, 4 and rank 1 reads 1, 3
    assert r0.workers[0].indices == (0, 2, 4)
    assert (r0.utterances, r0.bytes, r0.batches) == (20, 220, 5)
    assert (r1.utterances, r1.bytes, r1.batches) == (20, 200, 5)
    assert r0.dataset_utterances == {"a": 10, "b": 10}
    assert r0.compression_items == {"none": 2, "bz2": 1}
    assert r1.compression_items == {"none": 2}


def test_raw_lists_leave_out_the_index_lists():
    units = [Unit(1, 10, "raw", "none")] * 5
    part = summarize("classic", classic_split(5, 2, 2), units, list_indices=False)
    assert part.ranks[0].workers[0].indices == ()
    assert part.ranks[0].workers[0].items == 2
