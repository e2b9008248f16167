"""PyTorch's Flight Recorder (FR) of a running job: each rank's settings, its dump pipe, and the
dump files it wrote; the pipe written to ask for a dump (the trigger). Reading a dump is
`inputs/flight_dumps.py`'s.

A rank's FR keeps its last collectives (sequence number, op, sizes, dtypes, Python frames) when
`TORCH_FR_BUFFER_SIZE` (alias `TORCH_NCCL_TRACE_BUFFER_SIZE`) is > 0 as its process group is
created; torch 2.13 records 2000 entries when it is unset. The ranks dump it to
`TORCH_FR_DUMP_TEMP_FILE<rank>` (torch 2.13's default: `$XDG_CACHE_HOME/torch/comm_lib_trace_rank_<rank>`,
else `$HOME/.cache/torch/...`; older releases `/tmp/nccl_trace_rank_<rank>`): NCCL's watchdog on a
timeout, and any rank whose `<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe` is written to. Gloo
has no pipe; its dumps come from the job itself (`_dump_fr_trace`).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable

from hangdoc.base.outputs import kind_of
from hangdoc.base.parse import to_int
from hangdoc.base.words import FLIGHT_STATE_WORDS
from hangdoc.model import FrConfig, Job, ProcessInfo

LEGACY_DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"   # torch releases before the cache-directory default

BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")

PREFIX_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")

PIPE_VAR = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"

DUMP_ON_TIMEOUT_VAR = "TORCH_NCCL_DUMP_ON_TIMEOUT"


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
    state = FLIGHT_STATE_WORDS.get(config.state, config.state)
    pipe = f", pipe {config.pipe}" if config.pipe_exists else ""
    return f"{state}{size}{pipe}"
