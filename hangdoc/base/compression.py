"""The names of the compressions hangdoc tells apart, shared by `check` (a shard's first bytes)
and the rules (a file's suffix, a decompressor's frames)."""
from __future__ import annotations

NONE = "none"
BZ2 = "bz2"
GZIP = "gzip"
XZ = "xz"
ZSTD = "zstd"
ZLIB = "zlib"
