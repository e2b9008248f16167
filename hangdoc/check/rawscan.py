"""The metadata pass over a raw list: does each line's audio file exist, and how large is it."""
from __future__ import annotations

import os
from collections.abc import Sequence

from hangdoc.check.datalist import is_remote
from hangdoc.check.model import ListEntry, ShardInfo


def scan_audio(entries: Sequence[ListEntry]) -> tuple[tuple[int, ...], tuple[ShardInfo, ...]]:
    """The size of every line's audio file (0 when unknown), and the lines whose file is missing."""
    sizes = []
    missing = []
    for index, entry in enumerate(entries):
        if is_remote(entry.path):
            sizes.append(0)
            continue
        try:
            sizes.append(os.stat(entry.path).st_size)
        except OSError as exc:
            sizes.append(0)
            why = None if isinstance(exc, FileNotFoundError) else exc.strerror
            missing.append(ShardInfo(index, entry.path, entry.source, "missing", error=why))
    return tuple(sizes), tuple(missing)
