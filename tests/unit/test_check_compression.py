"""Compression by magic bytes, and WeNet's grouping of tar members into utterances."""
from __future__ import annotations

import pytest

from hangdoc.check.compression import classify, slow_kinds
from hangdoc.check.pairing import pair_members
from factories import write_shard


@pytest.mark.parametrize("head, kind", [
    (b"BZh91AY", "bz2"),
    (b"\x1f\x8b\x08\x00\x00\x00", "gzip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd\x00\x00", "zstd"),
    (b"utt1.w", "none"),
    (b"BZhX..", "none"),
    (b"", "none"),
])
def test_classify_reads_the_magic_bytes(head, kind):
    assert classify(head) == kind


@pytest.mark.parametrize("compression", ["none", "bz2", "gzip", "xz"])
def test_real_shards_are_classified_by_their_first_bytes(tmp_path, compression):
    path = write_shard(tmp_path / "s.tar", ["a", "b"], compression=compression)
    assert classify(path.read_bytes()[:6]) == compression


def test_bz2_and_xz_are_slow_unless_measured_fast_and_gzip_only_when_measured_slow():
    assert slow_kinds({"none", "bz2", "gzip"}, {}) == {"bz2"}
    assert slow_kinds({"bz2", "xz"}, {"bz2": 1.5}) == {"xz"}
    assert slow_kinds({"gzip"}, {"gzip": 4.0}) == {"gzip"}
    assert slow_kinds({"none"}, {"none": 1.0}) == frozenset()


def test_pairs_are_adjacent_audio_and_transcript_members():
    pairing = pair_members(["a.wav", "a.txt", "b.flac", "b.txt", "c.txt", "d.wav", "notes", "e.json"])
    assert pairing.members == 8
    assert pairing.utterances == 2
    assert pairing.unpaired == ("c.txt has no adjacent audio member", "d.wav has no adjacent d.txt")
    assert pairing.strays == ("notes", "e.json")


def test_a_pair_split_by_another_key_is_two_broken_samples():
    pairing = pair_members(["a.wav", "b.wav", "b.txt", "a.txt"])
    assert pairing.utterances == 1
    assert len(pairing.unpaired) == 2


def test_the_sample_takes_one_shard_of_each_compression_first_then_spreads_out():
    from hangdoc.check.model import ShardInfo
    from hangdoc.check.throughput import choose_sample

    shards = [ShardInfo(i, f"s{i}", "a.list", "ok", 100, "bz2" if i in (5, 6) else "none") for i in range(10)]
    shards[3] = ShardInfo(3, "s3", "a.list", "missing")
    picked = choose_sample(shards, 4)
    assert picked[:2] == (5, 0)
    assert len(picked) == 4 and 3 not in picked
    assert choose_sample(shards, 0) == ()
    assert len(choose_sample(shards, 50)) == 9
