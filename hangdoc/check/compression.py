"""Name a shard's compression from its first bytes; say which kinds starve a DataLoader."""
from __future__ import annotations

from collections.abc import Iterable

from hangdoc.base.compression import BZ2, GZIP, NONE, XZ, ZSTD

MAGIC_LEN = 6
_MAGIC = (
    (b"\x1f\x8b", GZIP),
    (b"\xfd7zXZ\x00", XZ),
    (b"\x28\xb5\x2f\xfd", ZSTD),
)

# Slow by nature when not measured: bz2 and xz decompress at tens of MB/s per core.
INHERENTLY_SLOW = frozenset({BZ2, XZ})
# Measured this many times slower than the same tar uncompressed counts as slow.
SLOWDOWN_LIMIT = 3.0


def classify(head: bytes) -> str:
    """The compression of a file that starts with `head` (its first MAGIC_LEN bytes)."""
    if head[:3] == b"BZh" and head[3:4].isdigit():
        return BZ2
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return NONE


def slow_kinds(present: Iterable[str], measured: dict[str, float]) -> frozenset[str]:
    """The compressions among `present` that are slow: measured slowdown >= SLOWDOWN_LIMIT,
    or bz2/xz when no sample measured them."""
    slow = set()
    for kind in set(present) - {NONE}:
        slowdown = measured.get(kind)
        if (slowdown is None and kind in INHERENTLY_SLOW) or (slowdown or 0.0) >= SLOWDOWN_LIMIT:
            slow.add(kind)
    return frozenset(slow)
