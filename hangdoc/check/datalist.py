"""Read WeNet data lists: a shard list (one tar path per line) or a raw list (JSON lines).

Relative paths resolve against the list's directory. A line that cannot be parsed is
kept as a `BadLine` (a finding), a list that cannot be read is a HangdocError (exit 2).
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from hangdoc.check.model import BadLine, DataList, ListEntry
from hangdoc.base.errors import HangdocError
from hangdoc.base.limits import MAX_LIST_BYTES, MAX_LIST_DEPTH, MAX_LIST_ENTRIES, TooLarge, read_regular

SHARD = "shard"
RAW = "raw"
RAW_KEYS = ("key", "wav", "txt")


def is_remote(path: str) -> bool:
    return "://" in path


def _resolve(path: str, base: str) -> str:
    if is_remote(path) or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base, path))


def parse_list(text: str, source: str, base: str) -> DataList:
    """Parse a list's text; the first non-blank line decides shard or raw."""
    if text.count("\n") > MAX_LIST_ENTRIES and sum(1 for line in text.splitlines() if line.strip()) > MAX_LIST_ENTRIES:
        raise HangdocError(f"data list {source} is beyond a budget: more than {MAX_LIST_ENTRIES:,} lines "
                           "(docs/check.md, budgets); check a part of it")
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    kind = RAW if lines and lines[0][1].startswith("{") else SHARD
    entries: list[ListEntry] = []
    bad: list[BadLine] = []
    for number, line in lines:
        if kind == SHARD:
            if line.startswith("{"):
                bad.append(BadLine(source, number, "a JSON line in a shard list"))
            else:
                entries.append(ListEntry(source, number, _resolve(line, base)))
            continue
        if _depth(line) > MAX_LIST_DEPTH:
            bad.append(BadLine(source, number, f"nested more than {MAX_LIST_DEPTH} deep, not read"))
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            bad.append(BadLine(source, number, f"not JSON ({exc.msg})"))
            continue
        missing = [k for k in RAW_KEYS if not isinstance(obj, dict) or k not in obj]
        if missing:
            bad.append(BadLine(source, number, f"no {', '.join(missing)} key"))
            continue
        entries.append(ListEntry(source, number, _resolve(str(obj["wav"]), base), key=str(obj["key"])))
    return DataList(path=source, kind=kind, entries=tuple(entries), bad_lines=tuple(bad))


def _depth(line: str) -> int:
    """How deep a JSON line nests (brackets inside strings not counted); cheap for ordinary lines."""
    if line.count("[") + line.count("{") <= MAX_LIST_DEPTH:
        return 0
    depth = deepest = 0
    in_string = escaped = False
    for char in line:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def short_names(paths: Sequence[str]) -> dict[str, str]:
    """A short label per list: its file name, with parent folders added until labels are unique."""
    depth = 1
    while True:
        labels = {p: os.path.join(*Path(p).parts[-depth:]) for p in paths}
        if len(set(labels.values())) == len(labels) or depth >= max(len(Path(p).parts) for p in paths):
            return labels
        depth += 1


def read_list(path: str | Path) -> DataList:
    path = Path(path)
    try:
        text = read_regular(path, MAX_LIST_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise HangdocError(f"data list not found: {path}") from None
    except TooLarge as exc:
        if path.is_dir():
            raise HangdocError(f"{path} is a directory, not a data list") from None
        raise HangdocError(f"data list {path} is refused: {exc} (docs/check.md, budgets)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HangdocError(f"cannot read data list {path}: {exc}") from None
    data = parse_list(text, str(path), str(path.parent))
    if not data.entries and not data.bad_lines:
        raise HangdocError(f"data list {path} is empty")
    return data


def read_lists(paths: Sequence[str | Path]) -> tuple[DataList, ...]:
    """Read every list; they must be one kind, as WeNet reads a single data_type."""
    lists = tuple(read_list(p) for p in paths)
    kinds = {d.kind for d in lists}
    if len(kinds) > 1:
        described = ", ".join(f"{d.path} is a {d.kind} list" for d in lists)
        raise HangdocError(f"the lists mix shard and raw lists ({described}); check each kind on its own")
    return lists
