"""Who holds the write end of a pipe a process of the job sleeps reading: the node's descriptors.

A read on an empty pipe ends with EOF once no process holds the pipe's write end; while one does,
it waits for that process to write. Which processes hold it, the kernel does not say of the pipe;
each process's descriptors do: /proc/PID/fd/N links to "pipe:[INODE]" (a FIFO: its path), and
/proc/PID/fdinfo/N's flags give the mode it was opened in (O_WRONLY or O_RDWR: a write end).

It is read only in a round where some process of the job, read in full, sleeps in a pipe read
(its wchan): the descriptor it reads, from /proc/PID/syscall (`pipe_read_of`); then the holders of
the write ends, once for all of them (`pipe_writers`): every process of the node is looked at, since a
pipe's descriptors are inherited by whatever a holder forks, the job's process tree or not (a
daemon a child started, reparented to init). The links of the processes the round read already
are not read again.
"""
from __future__ import annotations

import os

from hangdoc.base.names import read_link
from hangdoc.base.syscalls import syscall_name
from hangdoc.collect.procfs import ProcDenied, ProcFS, ProcGone
from hangdoc.model import MAX_PIPE_WRITERS, PipeEnd, PipeRead

_WRITE_MODES = (os.O_WRONLY, os.O_RDWR)


def pipe_read_of(procfs: ProcFS, pid: int) -> PipeRead | None:
    """The pipe or FIFO a process asleep in a pipe read (its wchan) reads: the descriptor
    /proc/PID/syscall shows read(2) called on, and what it links to. None: not in such a read now
    (it left it since its wchan was read), or not readable."""
    try:
        fields = procfs.read_text(pid, "syscall").split()
        if len(fields) < 2 or syscall_name(procfs.arch, fields[0]) not in ("read", "readv"):
            return None
        fd = int(fields[1], 16)
        link = next(iter(procfs.fd_links(pid, (fd,))), None)
    except (ProcGone, ProcDenied, ValueError):
        return None
    return PipeRead(fd, link.target) if link is not None and link.kind in ("pipe", "fifo") else None


# A reading of the node's write ends is kept for this many captures at most while its processes stay the same.
KEEP_SCANS = 3


class PipeScan:
    """The node's write ends of the pipes asked for, capture after capture: a reading is kept while
    the node's processes stay the same (KEEP_SCANS captures at most), and read again when one
    started or ended, or another pipe is asked for. A process comes to hold a pipe by a fork (a new
    pid) or by a holder handing it over; with the same processes the holders can only have let go
    since, and a reading that names a holder too many proves no pipe unwritable, it only waits."""

    def __init__(self) -> None:
        self._pids: frozenset[int] | None = None
        self._found: dict[str, tuple[PipeEnd, ...]] = {}
        self._unread = 0
        self._kept = 0

    def writers(self, procfs: ProcFS, targets: set[str]) -> tuple[dict[str, tuple[PipeEnd, ...]], int]:
        """`pipe_writers`, or the last reading of them where it may stand."""
        pids = frozenset(procfs.pids())
        self._kept += 1
        if pids != self._pids or not targets <= self._found.keys() or self._kept >= KEEP_SCANS:
            self._found, self._unread = pipe_writers(procfs, targets, pids)
            self._pids, self._kept = pids, 0
        return {target: self._found[target] for target in targets}, self._unread


def pipe_writers(procfs: ProcFS, targets: set[str], pids=None) -> tuple[dict[str, tuple[PipeEnd, ...]], int]:
    """target -> the write ends held on the node (pid on the node, fd), for each of `targets`
    ("pipe:[INODE]" or a FIFO's path), over `pids` (the node's, listed when None); and how many
    processes' descriptors could not be read. OSError when /proc itself cannot be listed."""
    found: dict[str, list[PipeEnd]] = {target: [] for target in targets}
    unread = 0
    for pid in sorted(procfs.pids() if pids is None else pids):
        links = procfs.fd_targets.get(pid)
        if links is None:
            try:
                links = _links(procfs, pid)
            except PermissionError:
                unread += 1
                continue
            except OSError:
                continue            # gone since the listing
        for fd, target in links.items():
            ends = found.get(target)
            if ends is None or len(ends) >= MAX_PIPE_WRITERS:
                continue
            if _opened_for_writing(procfs, pid, fd):
                ends.append(PipeEnd(pid, fd))
    return {target: tuple(ends) for target, ends in found.items()}, unread


def _links(procfs: ProcFS, pid: int) -> dict[int, str]:
    fd_dir = procfs.path(pid, "fd")
    links = {}
    for name in os.listdir(fd_dir):
        try:
            links[int(name)] = read_link(f"{fd_dir}/{name}")
        except (OSError, ValueError):
            continue                # closed between the listing and the read
    return links


def _opened_for_writing(procfs: ProcFS, pid: int, fd: int) -> bool:
    try:
        info = procfs.read_text(pid, f"fdinfo/{fd}")
    except (ProcGone, ProcDenied):
        return False
    for line in info.splitlines():
        if line.startswith("flags:"):
            try:
                return (int(line.split()[1], 8) & os.O_ACCMODE) in _WRITE_MODES
            except (IndexError, ValueError):
                return False
    return False
