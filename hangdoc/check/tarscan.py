"""The metadata pass over one shard: exists, readable, compression, and member headers.

An uncompressed tar is walked header by header, seeking over member data, so a shard
costs a few reads however large it is. Counting the members of a compressed shard means
decompressing it, which is left to the sampled throughput pass.
"""
from __future__ import annotations

import os
import tarfile

from hangdoc.base.limits import TooLarge, open_regular, require_regular
from hangdoc.check.compression import MAGIC_LEN, NONE, classify
from hangdoc.check.datalist import is_remote
from hangdoc.check.model import ShardInfo
from hangdoc.check.pairing import pair_members


def scan_shard(index: int, path: str, dataset: str) -> ShardInfo:
    if is_remote(path):
        return ShardInfo(index, path, dataset, "remote")
    try:
        size = require_regular(path).st_size
        with open_regular(path) as f:
            head = f.read(MAGIC_LEN)
            compression = classify(head)
            if compression != NONE:
                return ShardInfo(index, path, dataset, "ok", size, compression)
            return _scan_plain_tar(index, path, dataset, size, f)
    except FileNotFoundError:
        return ShardInfo(index, path, dataset, "missing")
    except TooLarge as exc:        # a FIFO would block for ever, a device read for ever
        what = "a directory, not a tar file" if os.path.isdir(path) else str(exc)
        return ShardInfo(index, path, dataset, "unreadable", error=what)
    except OSError as exc:
        return ShardInfo(index, path, dataset, "unreadable", error=exc.strerror or str(exc))


_BLOCK = 512
_FILE_TYPES = (b"0", b"\0", b"7")
_PLAIN_TYPES = _FILE_TYPES + (b"1", b"2", b"3", b"4", b"5", b"6")


def fast_members(f, size: int) -> list[tuple[str, bool]] | None:
    """(name, is a regular file) of each member, from plain ustar / v7 headers alone: about 10 x
    faster than tarfile on shards of thousands of small members. None for anything else (pax or
    GNU long names, a bad checksum, a short read, base-256 sizes): tarfile then reads the shard
    and says what is wrong."""
    members: list[tuple[str, bool]] = []
    offset = 0
    while offset < size:
        f.seek(offset)
        header = f.read(_BLOCK)
        if header == bytes(_BLOCK):
            return members    # the end-of-archive marker
        if len(header) < _BLOCK or header[156:157] not in _PLAIN_TYPES or header[124] & 0x80:
            return None
        try:
            checksum = int(header[148:156].replace(b"\0", b" ").strip() or b"-1", 8)
            length = int(header[124:136].replace(b"\0", b" ").strip() or b"0", 8)
        except ValueError:
            return None
        if checksum != sum(header[:148]) + 256 + sum(header[156:]):
            return None
        name = header[:100].split(b"\0", 1)[0]
        if header[257:262] == b"ustar":
            prefix = header[345:500].split(b"\0", 1)[0]
            if prefix:
                name = prefix + b"/" + name
        members.append((name.decode("utf-8", "surrogateescape"), header[156:157] in _FILE_TYPES))
        offset += _BLOCK + (length + _BLOCK - 1) // _BLOCK * _BLOCK
        if offset > size:
            return None   # truncated: tarfile words it
    return members


def _scan_plain_tar(index: int, path: str, dataset: str, size: int, f) -> ShardInfo:
    fast = fast_members(f, size) if size else None
    if fast:
        pairing = pair_members(name for name, regular in fast if regular)
        strays = pairing.strays + tuple(name for name, regular in fast if not regular)
        return ShardInfo(index, path, dataset, "ok", size, NONE, members=len(fast),
                         utterances=pairing.utterances, unpaired=pairing.unpaired, strays=strays,
                         layout=pairing.layout)
    f.seek(0)
    try:
        with tarfile.open(fileobj=f, mode="r:") as tar:
            members = tar.getmembers()
    except tarfile.TarError as exc:
        if size == 0:
            why = "an empty file"
        elif "unexpected end of data" in str(exc):
            why = "truncated: unexpected end of data"
        else:
            why = f"not a tar archive ({exc})"
        return ShardInfo(index, path, dataset, "unreadable", size, NONE, error=why)
    if members and members[-1].offset_data + members[-1].size > size:
        last = members[-1]
        return ShardInfo(index, path, dataset, "unreadable", size, NONE,
                         error=f"truncated: member {last.name} ends at byte "
                               f"{last.offset_data + last.size:,}, the file has {size:,}")
    pairing = pair_members(m.name for m in members if m.isfile())
    strays = pairing.strays + tuple(m.name for m in members if not m.isfile())
    return ShardInfo(index, path, dataset, "ok", size, NONE, members=len(members),
                     utterances=pairing.utterances, unpaired=pairing.unpaired, strays=strays, layout=pairing.layout)
