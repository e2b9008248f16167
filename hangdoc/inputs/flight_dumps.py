"""Flight Recorder dump files read safely, wherever they come from: the files a watch's trigger made
a rank write (`live/flight.py`), and the files `hangdoc report` is given.

Dumps are pickles or JSON. A pickle is read by an unpickler that admits no global at all, so
only dicts, lists, tuples, strings, numbers, booleans and None can come out of it: a dump that
names a class or a function is refused with one line and nothing in it runs.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import pickle
import re
from pathlib import Path

from hangdoc.base.limits import (
    MAX_DUMP_BYTES, MAX_DUMP_DEPTH, MAX_DUMP_OBJECTS, MAX_NUMBER, TooLarge, read_regular, within_values,
)
from hangdoc.base.parse import to_int
from hangdoc.model import FlightRecord, FrEntry, FrFrame, FrGroup

_FR_KEYS = (b'"comm_lib_version"', b'"entries"', b'"pg_config"', b'"pg_status"', b'"version"', b'"nccl_comm_state"')

_DUMP_NAME = re.compile(r"^(?P<stem>.*?)(?P<rank>\d+)(?P<ext>\.json|\.pickle|\.pkl)?$")
# How a name `_DUMP_NAME` takes ends (before a last newline, which `$` passes over): looked at first,
# the pattern's search from every place of the name is made only for names that may be dumps.
_DUMP_ENDS = (*"0123456789", ".json", ".pickle", ".pkl")


class BadDump(Exception):
    """A file that is not a Flight Recorder dump hangdoc will read; the message is one line."""


def mtime_of(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class _PlainUnpickler(pickle.Unpickler):
    """Admits no global: only the containers and scalars the pickle opcodes build themselves."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a Flight Recorder dump never does")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it holds a persistent reference, which a Flight Recorder dump never does")


def loads_plain(data: bytes) -> object:
    """Unpickle bytes that may only hold dicts, lists, tuples, str, bytes, numbers, bools and None."""
    return _PlainUnpickler(io.BytesIO(data)).load()


def read_dump(path: str | Path, rank: int | None = None, trigger: str = "given") -> FlightRecord:
    """One dump file (pickle or JSON); the rank is the file name's trailing number unless given."""
    path = Path(path)
    if rank is None:
        rank = dump_rank(path)
        if rank is None:
            raise BadDump(f"{path}: no rank in the file name (Flight Recorder names dumps <prefix><rank>)")
    try:
        data = read_regular(path, MAX_DUMP_BYTES)
    except TooLarge as exc:
        raise BadDump(f"{path}: refused, not read: {exc}") from None
    except OSError as exc:
        raise BadDump(f"{path}: cannot read: {exc.strerror}") from None
    form = "pickle" if data[:1] == b"\x80" else "json"
    try:
        raw = loads_plain(data) if form == "pickle" else json.loads(data)
    except pickle.UnpicklingError as exc:
        raise BadDump(f"{path}: refused, not read: {exc}") from None
    except (RecursionError, MemoryError) as exc:
        raise BadDump(f"{path}: refused, not read: {_too_big(exc)}") from None
    except Exception as exc:    # a truncated or corrupt pickle fails in many ways
        if form == "json" and isinstance(exc, (ValueError, UnicodeDecodeError)):
            raise BadDump(f"{path}: neither a pickle nor JSON ({exc})") from None
        raise BadDump(f"{path}: not a readable pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(raw, dict) or "entries" not in raw and "pg_status" not in raw:
        raise BadDump(f"{path}: not a Flight Recorder dump (no entries, no pg_status)")
    try:
        within_budget(raw)
        return _record(raw, rank, str(path), form, trigger, mtime_of(path))
    except TooLarge as exc:
        raise BadDump(f"{path}: refused, not read: {exc}") from None
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise BadDump(f"{path}: a Flight Recorder dump of an unexpected shape ({type(exc).__name__}: {exc})") from None


def _too_big(exc: BaseException) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else "too large to hold in memory"


def within_budget(raw: object) -> None:
    """TooLarge when a decoded dump holds more than MAX_DUMP_OBJECTS values (a shared one counted at
    each use, as the copy into the model would copy it) or nests deeper than MAX_DUMP_DEPTH."""
    within_values(raw, MAX_DUMP_OBJECTS, MAX_DUMP_DEPTH)


def dump_rank(path: Path) -> int | None:
    m = _DUMP_NAME.match(path.name)
    return int(m.group("rank")) if m else None


def looks_like_dump(path: Path) -> bool:
    """A regular file named <prefix><rank> that starts like a pickle, or like FR's JSON (its keys, no
    hangdoc bundle's schema)."""
    if dump_rank(path) is None:
        return False           # by its name alone: a directory of 16,384 node bundles is not opened twice
    try:
        if not path.is_file() or path.suffix == ".pipe":
            return False
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    if head[:1] == b"\x80":
        return True
    text = head.lstrip()
    return text[:1] == b"{" and b'"schema"' not in text and any(key in text for key in _FR_KEYS)


def load_dumps(paths) -> tuple[tuple[FlightRecord, ...], tuple[str, ...]]:
    """FR dump files, or directories holding them, as `hangdoc report` is given them."""
    records, errors = [], []
    for path in map(Path, paths):
        files = sorted(p for p in path.iterdir() if looks_like_dump(p)) if path.is_dir() else [path]
        for file in files:
            try:
                records.append(read_dump(file))
            except BadDump as exc:
                errors.append(str(exc))
    return tuple(records), tuple(errors)


def _int(value) -> int | None:
    """An integer of the dump, None beyond +-MAX_NUMBER (20,000 digits cannot even be printed)."""
    try:
        number = to_int(value)
    except OverflowError:       # int(inf)
        return None
    return number if number is not None and -MAX_NUMBER <= number <= MAX_NUMBER else None


def _ranks(value) -> tuple[int, ...]:
    if isinstance(value, str):
        value = [v for v in re.split(r"[\s,\[\]]+", value) if v]
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(r for r in (_int(v) for v in value) if r is not None)


def _sizes(value) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(tuple(_int(d) or 0 for d in shape) if isinstance(shape, (list, tuple)) else () for shape in value)


def _texts(value) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else ()


def _entry(raw: dict) -> FrEntry:
    group = raw.get("process_group") or ("", "")
    is_p2p = bool(raw.get("is_p2p"))
    seq = _int(raw.get("p2p_seq_id") if is_p2p else raw.get("collective_seq_id"))
    frames = tuple(FrFrame(str(f.get("name", "?")), str(f.get("filename", "?")), _int(f.get("line")) or 0)
                   for f in raw.get("frames") or () if isinstance(f, dict))
    duration = raw.get("duration_ms")
    return FrEntry(
        pg_name=str(group[0]), pg_desc=str(group[1]) if len(group) > 1 else "",
        seq=seq if seq is not None else -1, op=str(raw.get("profiling_name") or "?"),
        state=str(raw.get("state") or "?"), retired=bool(raw.get("retired")),
        input_sizes=_sizes(raw.get("input_sizes")), input_dtypes=_texts(raw.get("input_dtypes")),
        output_sizes=_sizes(raw.get("output_sizes")), output_dtypes=_texts(raw.get("output_dtypes")),
        is_p2p=is_p2p, time_created_ns=_int(raw.get("time_created_ns")),
        duration_ms=float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool)
        and abs(duration) < MAX_NUMBER else None,
        frames=frames,
    )


def _record(raw: dict, rank: int, source: str, form: str, trigger: str, mtime: float) -> FlightRecord:
    entries = tuple(_entry(e) for e in raw.get("entries") or () if isinstance(e, dict))
    configs = raw.get("pg_config") or {}
    status = raw.get("pg_status") or {}
    names = list(dict.fromkeys([*status, *(e.pg_name for e in entries)]))
    descs = {e.pg_name: e.pg_desc for e in entries}
    groups = []
    for name in names:
        config = configs.get(name) if isinstance(configs.get(name), dict) else {}
        st = status.get(name) if isinstance(status.get(name), dict) else {}
        groups.append(FrGroup(
            name=str(name), desc=str(config.get("desc") or descs.get(name, "")),
            ranks=_ranks(config.get("ranks")),
            last_enqueued=_int(st.get("last_enqueued_collective")),
            last_started=_int(st.get("last_started_collective")),
            last_completed=_int(st.get("last_completed_collective")),
        ))
    return FlightRecord(rank=rank, source=source, form=form, version=str(raw.get("version", "?")),
                        trigger=trigger, groups=tuple(groups), entries=entries, mtime=mtime or None)


KEEP_ENTRIES = 200      # per dump in a bundle: the stuck collective is among the newest; pg_status has the rest


def newest(record: FlightRecord, keep: int) -> FlightRecord:
    if len(record.entries) <= keep:
        return record
    return dataclasses.replace(record, entries=record.entries[-keep:])


def split_inputs(paths) -> tuple[list[Path], list[Path]]:
    """(bundle files or directories, FR dump files) among what `hangdoc report` was given.

    A directory may hold bundles (*.json with a schema), dumps (`<prefix><rank>`, pickle or JSON), or both.
    """
    bundles: list[Path] = []
    dumps: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            # From one listing, by name (as paths in one folder sort), a Path made only for what is
            # kept: a folder of 131,072 node bundles holds neither, and was a second of Path objects.
            names = sorted(os.listdir(path))
            maybe = (name for name in names if name.removesuffix("\n").endswith(_DUMP_ENDS) and _DUMP_NAME.match(name))
            found = [p for p in (path / name for name in maybe) if looks_like_dump(p)]
            taken = {p.name for p in found}
            jsons = [path / name for name in names if name.endswith(".json") and name not in taken]   # glob *.json
            dumps += found
            bundles += jsons if (jsons or found) else [path]   # neither: let the bundle loader say so
        elif looks_like_dump(path):
            dumps.append(path)
        else:
            bundles.append(path)
    return bundles, dumps
