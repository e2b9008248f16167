"""Turn shards into partition units, estimating what the metadata pass could not count.

A compressed shard that was not sampled has a size but no member count; its utterances
are estimated from the utterances per byte of the counted shards of the same
compression (else of all counted shards), and the estimate is reported as one.
"""
from __future__ import annotations

from collections.abc import Sequence

from hangdoc.check.compression import NONE
from hangdoc.check.model import ListEntry, ShardInfo
from hangdoc.check.partition import Unit


def shard_units(shards: Sequence[ShardInfo]) -> tuple[tuple[Unit, ...], int]:
    """One unit per shard, and how many of them carry an estimate."""
    rates = _rates(shards)
    units = []
    estimated = 0
    for shard in shards:
        kind = shard.compression or NONE
        utterances = shard.utterances
        if utterances is None and shard.status == "ok":
            rate = rates.get(kind, rates.get("*"))
            utterances = round(rate * (shard.size_bytes or 0)) if rate is not None else 0
            estimated += 1
        units.append(Unit(utterances or 0, shard.size_bytes or 0, shard.dataset, kind))
    return tuple(units), estimated


def raw_units(entries: Sequence[ListEntry], sizes: Sequence[int]) -> tuple[Unit, ...]:
    """A raw list: every line is one utterance of its wav's size."""
    return tuple(Unit(1, size, entry.source, NONE) for entry, size in zip(entries, sizes))


def _rates(shards: Sequence[ShardInfo]) -> dict[str, float]:
    """Utterances per byte among counted shards, per compression and overall ("*")."""
    utts: dict[str, int] = {}
    size: dict[str, int] = {}
    for shard in shards:
        if shard.status == "ok" and shard.utterances is not None and shard.size_bytes:
            for key in (shard.compression or NONE, "*"):
                utts[key] = utts.get(key, 0) + shard.utterances
                size[key] = size.get(key, 0) + shard.size_bytes
    return {key: utts[key] / size[key] for key in utts}
