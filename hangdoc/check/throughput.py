"""The sampled pass: read a few shards the way a DataLoader worker does, and time it.

A compressed shard is first read once untimed (which warms the page cache), then walked
through the decompressor with the same streaming tar walk that reads every member,
decompressed to a scratch file, and walked again as the plain tar. The ratio is what the
compression costs the worker: "bz2 reads 40 x slower than the same tar uncompressed".
"""
from __future__ import annotations

import bz2
import gzip
import importlib.util
import lzma
import os
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import IO

from hangdoc.base.limits import MAX_MEMBER_BYTES, MAX_SAMPLE_TAR_BYTES, TooLarge, open_regular, require_regular
from hangdoc.check.compression import BZ2, GZIP, NONE, XZ, ZSTD
from hangdoc.check.model import ShardInfo, Throughput
from hangdoc.check.pairing import pair_members

_READ_ERRORS = (OSError, EOFError, tarfile.TarError, lzma.LZMAError, zlib.error)


def can_read(compression: str | None) -> bool:
    """Whether this Python can decompress it: zstd needs Python 3.14 or `zstandard`."""
    if compression != ZSTD or sys.version_info >= (3, 14):
        return True
    return importlib.util.find_spec("zstandard") is not None


def choose_sample(shards: Sequence[ShardInfo], n: int) -> tuple[int, ...]:
    """Up to `n` readable shards: first one of each (compression, list), compressed ones
    first, then shards spread evenly over the list."""
    readable = [s for s in shards if s.status == "ok" and can_read(s.compression)]
    if n <= 0 or not readable:
        return ()
    picked: list[int] = []
    seen: set[tuple[str | None, str]] = set()
    for shard in sorted(readable, key=lambda s: (s.compression == NONE, s.index)):
        if (shard.compression, shard.dataset) not in seen:
            seen.add((shard.compression, shard.dataset))
            picked.append(shard.index)
    step = max(len(readable) / n, 1.0)
    picked.extend(readable[int(i * step)].index for i in range(min(n, len(readable))))
    picked.extend(s.index for s in readable)      # fill up when the picks above coincide
    return tuple(dict.fromkeys(picked))[:n]


def open_stream(path: str, compression: str) -> IO[bytes]:
    """A binary stream of the shard's uncompressed tar (only a regular file: TooLarge for a FIFO or
    a device); raises OSError when it cannot."""
    if compression == NONE:
        return open_regular(path)
    require_regular(path)
    if compression == BZ2:
        return bz2.open(path, "rb")
    if compression == GZIP:
        return gzip.open(path, "rb")
    if compression == XZ:
        return lzma.open(path, "rb")
    if compression == ZSTD:
        return _open_zstd(path)
    raise OSError(f"unknown compression {compression!r}")


def _open_zstd(path: str) -> IO[bytes]:
    try:
        from compression import zstd  # Python 3.14+
        return zstd.open(path, "rb")
    except ImportError:
        pass
    try:
        import zstandard
    except ImportError:
        raise OSError("reading zstd needs Python 3.14 or `pip install zstandard`") from None
    return zstandard.open(path, "rb")


def walk_tar(stream: IO[bytes]) -> list[str]:
    """Read every member in order, as a streaming reader does, 1 MiB at a time (a header may claim
    anything); the member names. TooLarge for a member beyond MAX_MEMBER_BYTES, from its header."""
    names = []
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if member.isfile():
                if member.size > MAX_MEMBER_BYTES:
                    raise TooLarge(f"member {member.name} claims {member.size:,} bytes, more than the "
                                   f"{MAX_MEMBER_BYTES:,} hangdoc reads of one")
                data = tar.extractfile(member)
                while data.read(1 << 20):
                    pass
                names.append(member.name)
    return names


def _warm(path: str) -> None:
    """Read the compressed file once, untimed, so the timed passes find it in the page cache."""
    with open_regular(path) as raw:
        while raw.read(1 << 20):
            pass


def _copy_within(stream: IO[bytes], out: IO[bytes], limit: int) -> None:
    copied = 0
    while chunk := stream.read(1 << 20):
        copied += len(chunk)
        if copied > limit:
            raise TooLarge(f"more than {limit:,} bytes once decompressed, more than hangdoc reads of a shard")
        out.write(chunk)


def _timed_walk(path: str, compression: str) -> tuple[list[str], float]:
    start = time.perf_counter()
    with open_stream(path, compression) as stream:
        names = walk_tar(stream)
    return names, time.perf_counter() - start


def measure_shard(shard: ShardInfo, scratch_dir: str | None = None) -> tuple[Throughput | None, ShardInfo]:
    """Time one shard; also returns the shard with its members counted (or marked unreadable)."""
    compression = shard.compression or NONE
    try:
        if compression == NONE:
            names, seconds = _timed_walk(shard.path, NONE)
            plain_seconds, tar_bytes = seconds, shard.size_bytes or 0
        else:
            _warm(shard.path)
            # The timed walk first: a member whose header claims more than the budget is refused
            # before anything is decompressed to the scratch file.
            names, seconds = _timed_walk(shard.path, compression)
            with tempfile.NamedTemporaryFile(dir=scratch_dir, suffix=".tar") as plain:
                with open_stream(shard.path, compression) as stream:
                    _copy_within(stream, plain, MAX_SAMPLE_TAR_BYTES)
                plain.flush()
                tar_bytes = os.fstat(plain.fileno()).st_size
                _, plain_seconds = _timed_walk(plain.name, NONE)
    except TooLarge as exc:
        return None, replace(shard, status="unreadable", error=f"refused: {exc}")
    except _READ_ERRORS as exc:
        why = f"cannot read as {compression} tar: {exc}"
        return None, replace(shard, status="unreadable", error=why)
    pairing = pair_members(names)
    counted = replace(shard, members=pairing.members, utterances=pairing.utterances,
                       unpaired=pairing.unpaired, strays=pairing.strays, layout=pairing.layout)
    seconds = max(seconds, 1e-9)
    return Throughput(
        index=shard.index, path=shard.path, compression=compression,
        size_bytes=shard.size_bytes or 0, tar_bytes=tar_bytes, utterances=pairing.utterances,
        seconds=seconds, plain_seconds=plain_seconds,
        mb_per_s=tar_bytes / seconds / 1e6, utt_per_s=pairing.utterances / seconds,
        slowdown=seconds / max(plain_seconds, 1e-9),
    ), counted
