"""Where a job's own words are: the launcher's and ranks' stdout/stderr when they are files,
torchrun's --log-dir, and TORCHELASTIC_ERROR_FILE. Tails are bounded and redacted."""
from __future__ import annotations

import functools
import os
from pathlib import Path

from hangdoc.collect.procfs import ProcFS
from hangdoc.model import Job, LogTail, Role
from hangdoc.base.names import shown
from hangdoc.base.limits import cut_line
from hangdoc.base.redact import redact_cached, redact_lines

TAIL_BYTES = 64 * 1024
TAIL_LINES = 400


def log_sources(job: Job, proc_root: str | Path = "/proc") -> tuple[str, ...]:
    """Regular files the job writes its output to, found while it is alive."""
    sources: list[str] = []
    procfs = ProcFS(proc_root)
    for proc in job.processes:
        if proc.role not in (Role.LAUNCHER, Role.RANK):
            continue
        # a pid another process took since: its descriptors are that stranger's output, not the job's
        same = procfs.started_as(proc.pid, proc.start_time) is not False if proc.start_time else True
        for fd in (1, 2) if same else ():
            try:
                target = os.readlink(Path(proc_root) / str(proc.pid) / "fd" / str(fd))
            except OSError:
                continue
            if target.startswith("/") and not target.startswith(("/dev/", "/proc/")) and Path(target).is_file():
                sources.append(target)
        error_file = proc.env.get("TORCHELASTIC_ERROR_FILE")
        if error_file:
            sources.append(error_file)
        log_dir = _log_dir(proc.cmdline)
        if log_dir and job.run_id:
            sources.extend(str(p) for p in sorted(Path(log_dir).glob(f"{job.run_id}*/attempt_*/*/std*.log")))
    return tuple(dict.fromkeys(sources))


def _log_dir(cmdline: tuple[str, ...]) -> str | None:
    for i, word in enumerate(cmdline):
        for flag in ("--log-dir", "--log_dir"):
            if word == flag and i + 1 < len(cmdline):
                return cmdline[i + 1]
            if word.startswith(flag + "="):
                return word.split("=", 1)[1]
    return None


def read_tail(path: str, max_bytes: int = TAIL_BYTES, max_lines: int = TAIL_LINES) -> LogTail | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    # A watch reads the same logs every round: an unchanged file is not read (nor redacted) again.
    return _tail(path, st.st_size, st.st_mtime_ns, st.st_ino, max_bytes, max_lines)


@functools.lru_cache(maxsize=256)
def _tail(path: str, _size: int, _mtime_ns: int, _ino: int, max_bytes: int, max_lines: int) -> LogTail | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return None
    lines = data.decode("utf-8", "replace").replace("\x00", "").splitlines()   # NULs: logline.RANK_PREFIX
    if size > max_bytes and lines:
        lines = lines[1:]   # the first line is cut in the middle
    return LogTail(source=redact_cached(shown(path)), lines=redact_lines([cut_line(line) for line in lines[-max_lines:]]),
                   mtime=_mtime_ns / 1e9)


def read_tails(sources: tuple[str, ...]) -> tuple[LogTail, ...]:
    tails = (read_tail(s) for s in sources)
    return tuple(t for t in tails if t is not None and t.lines)
