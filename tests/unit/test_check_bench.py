"""The benchmark function runs end to end on a small shard set."""
from __future__ import annotations

from hangdoc.check.bench import bench_check


def test_bench_check_times_the_metadata_and_sampled_passes():
    result = bench_check(n_shards=40)
    assert result["n_shards"] == 40
    assert result["metadata_within_target"] is True
    assert result["sampled_shards"] == 4
    assert set(result["throughput"]) == {"bz2", "none"}
    assert result["throughput"]["bz2"]["mb_per_s"] > 0
