"""PyTorch's Flight Recorder (FR): each rank's settings, its dump pipe, and its dumps, read safely.

A rank's FR keeps its last collectives (sequence number, op, sizes, dtypes, Python frames) when
`TORCH_FR_BUFFER_SIZE` (alias `TORCH_NCCL_TRACE_BUFFER_SIZE`) is > 0 as its process group is
created; torch 2.13 records 2000 entries when it is unset. The ranks dump it to
`TORCH_FR_DUMP_TEMP_FILE<rank>` (torch 2.13's default: `$XDG_CACHE_HOME/torch/comm_lib_trace_rank_<rank>`,
else `$HOME/.cache/torch/...`; older releases `/tmp/nccl_trace_rank_<rank>`): NCCL's watchdog on a
timeout, and any rank whose `<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe` is written to. Gloo
has no pipe; its dumps come from the job itself (`_dump_fr_trace`).

Dumps are pickles or JSON. A pickle is read by an unpickler that admits no global at all, so
only dicts, lists, tuples, strings, numbers, booleans and None can come out of it: a dump that
names a class or a function is refused with one line and nothing in it runs.
"""
from __future__ import annotations

import dataclasses
import errno
import io
import json
import os
import pickle
import re
import stat
import time
from pathlib import Path
from typing import Callable

from hangdoc.base.limits import (
    MAX_DUMP_BYTES, MAX_DUMP_DEPTH, MAX_DUMP_OBJECTS, MAX_NUMBER, TooLarge, read_regular, within_values,
)
from hangdoc.base.outputs import kind_of
from hangdoc.base.parse import to_int
from hangdoc.model import FlightRecord, FrConfig, FrEntry, FrFrame, FrGroup, Job, ProcessInfo

LEGACY_DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"   # torch releases before the cache-directory default
BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
PREFIX_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
PIPE_VAR = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
DUMP_ON_TIMEOUT_VAR = "TORCH_NCCL_DUMP_ON_TIMEOUT"
_FR_KEYS = (b'"comm_lib_version"', b'"entries"', b'"pg_config"', b'"pg_status"', b'"version"', b'"nccl_comm_state"')
_DUMP_NAME = re.compile(r"^(?P<stem>.*?)(?P<rank>\d+)(?P<ext>\.json|\.pickle|\.pkl)?$")


class BadDump(Exception):
    """A file that is not a Flight Recorder dump hangdoc will read; the message is one line."""


# --- settings, from each rank's recorded environment ---------------------------------------


def _first(env: dict[str, str], names: tuple[str, ...]) -> str | None:
    return next((env[n] for n in names if n in env), None)


def default_prefixes(environ=os.environ) -> tuple[str, ...]:
    """Where torch dumps when TORCH_FR_DUMP_TEMP_FILE is unset. The rank's HOME is not recorded
    (not on the environment allowlist): hangdoc's own is used, as it runs as the job's user."""
    cache = environ.get("XDG_CACHE_HOME") or (environ.get("HOME") or "/tmp") + "/.cache"
    return (f"{cache}/torch/comm_lib_trace_rank_", LEGACY_DEFAULT_PREFIX)


def fr_config(info: ProcessInfo, exists: Callable[[str], bool] = os.path.exists) -> FrConfig:
    """A rank's FR settings from its environment (ProcessInfo.env keeps every TORCH_* variable)."""
    env = info.env
    stem = env.get(PIPE_VAR)
    pipe = f"{stem}{info.rank}.pipe" if stem and info.rank is not None else None
    timeout = env.get(DUMP_ON_TIMEOUT_VAR)
    return FrConfig(
        pid=info.node_pid, rank=info.rank,
        buffer_size=to_int(_first(env, BUFFER_VARS)),
        dump_prefix=_first(env, PREFIX_VARS) or default_prefixes()[0], prefix_set=_first(env, PREFIX_VARS) is not None,
        pipe=pipe, pipe_exists=bool(pipe) and exists(pipe),
        dump_on_timeout=None if timeout is None else timeout.strip().lower() not in ("0", "false", "no", "off", ""),
    )


def fr_configs(job: Job, exists: Callable[[str], bool] = os.path.exists) -> tuple[FrConfig, ...]:
    return tuple(fr_config(p, exists) for p in job.ranks)


# --- trigger and collect -------------------------------------------------------------------


def trigger_pipes(configs, opener: Callable[..., int] = os.open) -> tuple[list[int], list[str]]:
    """Write to every rank's dump pipe that is a FIFO: the ranks whose pipe took the write, and one
    line for each pipe path left alone.

    Only a FIFO asks torch for a dump. Anything else at that path (a regular file, a link) was put
    there by the job or by anyone who can write the directory, and writing it would write their
    choice of file: it is checked with lstat, opened O_NOFOLLOW and fstat'd again once open.
    Non-blocking: a pipe nobody reads (the rank is gone) is skipped, never waited on."""
    triggered, refused = [], []
    for config in configs:
        if not config.pipe or not config.pipe_exists:
            continue
        try:
            mode = os.lstat(config.pipe).st_mode
        except OSError:
            continue
        if not stat.S_ISFIFO(mode):
            refused.append(_not_a_fifo(config, kind_of(mode) or "a regular file"))
            continue
        try:
            fd = opener(config.pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:      # swapped for a link since the lstat
                refused.append(_not_a_fifo(config, "a symbolic link"))
            elif exc.errno not in (errno.ENXIO, errno.ENOENT, errno.EACCES, errno.EPERM):
                raise
            continue
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISFIFO(mode):
                refused.append(_not_a_fifo(config, kind_of(mode) or "a regular file"))
                continue
            os.write(fd, b"1\n")
            triggered.append(config.rank)
        except OSError:
            pass
        finally:
            os.close(fd)
    return triggered, refused


def _not_a_fifo(config: FrConfig, what: str) -> str:
    return (f"rank {config.rank}: its dump pipe {config.pipe} is {what}, not a FIFO: left alone "
            "(only a FIFO made by torch asks a rank for a dump)")


def config_files(config: FrConfig) -> list[Path]:
    """The dump files of one rank that exist now, under its prefix (or torch's defaults when unset)."""
    prefixes = (config.dump_prefix,) if config.prefix_set else default_prefixes()
    return [f for prefix in prefixes for f in dump_files(prefix, config.rank)]


def dump_files(prefix: str, rank: int | None) -> list[Path]:
    """The files `<prefix><rank>` (and `.json` / `.pickle` beside it) that exist now."""
    if rank is None:
        return []
    base = Path(prefix + str(rank))
    found = []
    for path in (base, *(base.with_name(base.name + ext) for ext in (".json", ".pickle", ".pkl"))):
        try:
            if path.is_file():
                found.append(path)
        except OSError:
            continue
    return found


def collect_dumps(configs, *, trigger: bool = True, wait_s: float = 5.0,
                  clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                  opener: Callable[..., int] = os.open) -> tuple[tuple[FlightRecord, ...], tuple[str, ...]]:
    """Ask the ranks with a pipe to dump, wait at most `wait_s` for their files, read every dump there.

    Returns (records, errors): an unreadable or refused dump is one line in errors, never an exception.
    """
    configs = [c for c in configs if c.rank is not None]
    asked, refused = trigger_pipes(configs, opener) if trigger else ([], [])
    started = clock()
    if asked:
        pending = {c.rank: c for c in configs if c.rank in asked}
        sizes: dict[int, int] = {}
        while pending and clock() - started < wait_s:
            for rank, config in list(pending.items()):
                files = [f for f in config_files(config) if _mtime(f) >= started - 1.0]
                size = sum(_size(f) for f in files)
                if files and size and sizes.get(rank) == size:     # written, and no longer growing
                    del pending[rank]
                sizes[rank] = size
            if pending:
                sleep(0.2)
    records, errors = [], list(refused)
    for config in configs:
        for path in config_files(config):
            try:
                records.append(read_dump(path, config.rank, "pipe" if config.rank in asked else "found"))
            except BadDump as exc:
                errors.append(str(exc))
    return tuple(records), tuple(errors)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# --- reading dumps, without executing anything ------------------------------------------------


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
        return _record(raw, rank, str(path), form, trigger, _mtime(path))
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


# --- for the watch loop -------------------------------------------------------------------------


KEEP_ENTRIES = 200      # per dump in a bundle: the stuck collective is among the newest; pg_status has the rest


def _newest(record: FlightRecord, keep: int) -> FlightRecord:
    if len(record.entries) <= keep:
        return record
    return dataclasses.replace(record, entries=record.entries[-keep:])


class FlightCollector:
    """The watcher's FR and RAS evidence: settings every round; dumps and RAS once a rank looks stuck.

    The ranks' dump pipes are written to when a rank first looks stuck and again at most every
    `retrigger_s` while it stays so (NCCL dumps on every write); dump files are read again only
    when they change. Files older than the job's first rank are another job's, and skipped.
    """

    def __init__(self, wait_s: float = 5.0, ras: Callable | None = None, retrigger_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.wait_s, self.retrigger_s, self.clock = wait_s, retrigger_s, clock
        self.ras_query = ras
        self.triggered_at: float | None = None
        self.records: tuple[FlightRecord, ...] = ()
        self.errors: tuple[str, ...] = ()
        self.ras = None
        self._seen: dict[str, float] = {}

    def gather(self, job: Job, stuck: bool) -> bool:
        """Collect what there is; True when the evidence changed (the bundle should be redone)."""
        if not stuck or not job.ranks:
            return False
        changed = False
        if self.ras is None:
            from hangdoc.collect.ras import query_ras, uses_nccl

            if uses_nccl(job):
                self.ras = (self.ras_query or query_ras)(job)
                changed = True
        since = min(p.start_time for p in job.ranks)
        configs = fr_configs(job)
        files = {str(f): _mtime(f) for c in configs for f in config_files(c)}
        fresh = {path: t for path, t in files.items() if t >= since}
        now = self.clock()
        trigger = any(c.pipe_exists for c in configs) and (
            self.triggered_at is None or now - self.triggered_at >= self.retrigger_s)
        if trigger:
            self.triggered_at = now
        elif fresh == self._seen:
            return changed
        records, errors = collect_dumps(configs, trigger=trigger, wait_s=self.wait_s)
        records = tuple(_newest(r, KEEP_ENTRIES) for r in records if (r.mtime or 0.0) >= since)
        self._seen = {str(f): t for c in configs for f in config_files(c) if (t := _mtime(f)) >= since}
        if (records, errors) != (self.records, self.errors):
            self.records, self.errors, changed = records, errors, True
        return changed


# --- for `hangdoc report` -------------------------------------------------------------------------


def split_inputs(paths) -> tuple[list[Path], list[Path]]:
    """(bundle files or directories, FR dump files) among what `hangdoc report` was given.

    A directory may hold bundles (*.json with a schema), dumps (`<prefix><rank>`, pickle or JSON), or both.
    """
    bundles: list[Path] = []
    dumps: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if looks_like_dump(p))
            jsons = [p for p in sorted(path.glob("*.json")) if p not in found]
            dumps += found
            bundles += jsons if (jsons or found) else [path]   # neither: let the bundle loader say so
        elif looks_like_dump(path):
            dumps.append(path)
        else:
            bundles.append(path)
    return bundles, dumps


def rank_flight_text(pid: int, rank: int | None, procfs=None) -> str:
    """A live rank's FR settings in a few words, for `hangdoc ps`; "?" when its environment is unreadable."""
    from hangdoc.collect.procfs import ProcDenied, ProcFS, ProcGone
    from hangdoc.model import Role

    try:
        env = (procfs or ProcFS()).environ(pid)
    except (ProcGone, ProcDenied):
        return "?"
    config = fr_config(ProcessInfo(pid=pid, ppid=0, role=Role.RANK, cmdline=(), exe=None, start_time=0.0,
                                   env=env, rank=rank))
    size = f" ({config.buffer_size} entries)" if config.buffer_size else ""
    state = {"default": "unset (torch 2.13: on)"}.get(config.state, config.state)
    pipe = f", pipe {config.pipe}" if config.pipe_exists else ""
    return f"{state}{size}{pipe}"
