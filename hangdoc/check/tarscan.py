"""The metadata pass over one shard: exists, readable, compression, and member headers.

An uncompressed tar is walked header by header, seeking over member data, so a shard
costs a few reads however large it is. Counting the members of a compressed shard means
decompressing it, which is left to the sampled throughput pass.
"""
from __future__ import annotations

import os
import tarfile

from hangdoc.check.compression import MAGIC_LEN, NONE, classify
from hangdoc.check.datalist import is_remote
from hangdoc.check.model import ShardInfo
from hangdoc.check.pairing import pair_members


def scan_shard(index: int, path: str, dataset: str) -> ShardInfo:
    if is_remote(path):
        return ShardInfo(index, path, dataset, "remote")
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as f:
            head = f.read(MAGIC_LEN)
            compression = classify(head)
            if compression != NONE:
                return ShardInfo(index, path, dataset, "ok", size, compression)
            return _scan_plain_tar(index, path, dataset, size, f)
    except FileNotFoundError:
        return ShardInfo(index, path, dataset, "missing")
    except IsADirectoryError:
        return ShardInfo(index, path, dataset, "unreadable", error="a directory, not a tar file")
    except OSError as exc:
        return ShardInfo(index, path, dataset, "unreadable", error=exc.strerror or str(exc))


def _scan_plain_tar(index: int, path: str, dataset: str, size: int, f) -> ShardInfo:
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
                     utterances=pairing.utterances, unpaired=pairing.unpaired, strays=strays)
