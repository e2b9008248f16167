"""Copy the data list a rank's command line names into the bundle (bounded), with shard sizes.

Rules cannot read files; this is how `uneven-shards` counts what each rank and worker was
given. Relative paths resolve against the rank's working directory, as the job saw them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from hangdoc.base.cmdline import data_list
from hangdoc.base.limits import TooLarge, open_regular
from hangdoc.base.names import shown
from hangdoc.base.redact import redact_text
from hangdoc.model import DataListCopy, Job, Role

MAX_ENTRIES = 100_000
MAX_BYTES = 16 << 20


def copy_data_lists(job: Job, proc_root: str | Path = "/proc") -> tuple[DataListCopy, ...]:
    seen: dict[str, DataListCopy] = {}
    for rank in job.by_role(Role.RANK):
        named = data_list(rank.cmdline)
        if not named:
            continue
        try:
            cwd = os.readlink(Path(proc_root) / str(rank.pid) / "cwd")
        except OSError:
            cwd = "/"
        path = os.path.normpath(os.path.join(cwd, named))
        if path not in seen:
            copy = read_copy(path)
            if copy is not None:
                seen[path] = copy
    return tuple(seen.values())


def read_copy(path: str) -> DataListCopy | None:
    try:          # a FIFO named as the list would block the watch for ever
        with open_regular(path) as f:
            data = f.read(MAX_BYTES + 1)
    except (OSError, TooLarge):
        return None
    lines = [line.strip() for line in shown(data[:MAX_BYTES]).splitlines() if line.strip()]
    truncated = len(data) > MAX_BYTES or len(lines) > MAX_ENTRIES
    lines = lines[:MAX_ENTRIES]
    kind = "raw" if lines and lines[0].startswith("{") else "shard"
    base = os.path.dirname(path)
    entries = []
    for line in lines:
        if kind == "raw":
            try:
                line = str(json.loads(line).get("wav", ""))
            except (ValueError, AttributeError):
                line = ""
        entries.append(line if "://" in line or os.path.isabs(line) else os.path.join(base, line))
    sizes = tuple(_size(e) for e in entries) if kind == "shard" else tuple(None for _ in entries)
    return DataListCopy(path=redact_text(shown(path)), kind=kind, entries=tuple(redact_text(shown(e)) for e in entries),
                        sizes=sizes,
                        truncated=truncated)


def _size(path: str) -> int | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size
