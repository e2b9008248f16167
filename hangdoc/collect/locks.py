"""Who holds the file lock a process of the job waits for: /proc/locks, read at capture time.

/proc/locks lists every file lock of the machine, one line each; a process blocked behind a
lock follows it on a line of its own marked `->`, under the same number:

    2: FLOCK  ADVISORY  WRITE 28799 fe:00:2147933 0 EOF
    2: -> FLOCK  ADVISORY  WRITE 28800 fe:00:2147933 0 EOF

It is read only in a round where some process of the job sleeps on a file lock (its wchan), and
only the lines of those processes are kept, each with its holder's pid and command line and
the locked file's path, found among the waiter's open descriptors by device and inode.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from hangdoc.base.names import read_link
from hangdoc.base.redact import redact_cmdline
from hangdoc.collect.procfs import ProcFS
from hangdoc.model import FileLock


@dataclass(frozen=True)
class LockLine:
    """One line of /proc/locks."""

    number: str                    # the lock's number: a waiter carries its blocker's
    waiting: bool                  # a `->` line: blocked behind the lock of that number
    kind: str                      # FLOCK, POSIX, OFDLCK, LEASE, DELEG
    mode: str                      # READ, WRITE
    pid: int | None                # None: -1 (an OFD lock) or unreadable
    inode: str                     # "fe:00:2147933"


def parse_locks(text: str) -> list[LockLine]:
    """Every well-formed line of /proc/locks; others are skipped."""
    lines = []
    for raw in text.splitlines():
        number, sep, rest = raw.partition(":")
        words = rest.split()
        if not sep or not number.strip().isdigit():
            continue
        waiting = False
        while words and words[0] == "->":
            waiting, words = True, words[1:]
        if len(words) < 5:
            continue
        kind, _, mode, pid, inode = words[:5]
        pid_value = int(pid) if pid.isdigit() and int(pid) > 0 else None
        lines.append(LockLine(number.strip(), waiting, kind, mode, pid_value, inode))
    return lines


def lock_waits(procfs: ProcFS, pids: set[int]) -> tuple[dict[int, tuple[FileLock, ...]], str | None]:
    """pid -> the locks it waits for (with holder and path), for the `pids` that /proc/locks shows
    waiting; and why /proc/locks could not be read, when it could not."""
    try:
        lines = parse_locks(procfs.locks_text())
    except OSError as exc:
        return {}, f"/proc/locks: {exc.strerror or exc}"
    holders: dict[str, LockLine] = {}
    waits: dict[int, list[FileLock]] = {}
    for line in lines:
        if not line.waiting:
            holders[line.number] = line
            continue
        if line.pid not in pids:
            continue
        holder = holders.get(line.number)
        holder_pid = holder.pid if holder is not None else None
        waits.setdefault(line.pid, []).append(FileLock(
            kind=line.kind, mode=line.mode, inode=line.inode,
            path=_path_of(procfs, line.pid, line.inode),
            holder_pid=holder_pid,
            holder_cmdline=redact_cmdline(procfs.cmdline_or_empty(holder_pid)) if holder_pid else (),
        ))
    return {pid: tuple(found) for pid, found in waits.items()}, None


def _inode_key(inode: str) -> tuple[int, int, int] | None:
    """"fe:00:2147933" -> (0xfe, 0x00, 2147933)."""
    parts = inode.split(":")
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2])
    except (IndexError, ValueError):
        return None


def _path_of(procfs: ProcFS, pid: int, inode: str) -> str | None:
    """The path of the waiter's open descriptor on that device and inode (the inode alone when
    a stacked file system reports another device)."""
    key = _inode_key(inode)
    if key is None:
        return None
    fd_dir = procfs.path(pid, "fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    by_inode = None
    for name in names:
        try:
            st = os.stat(f"{fd_dir}/{name}")
            if st.st_ino != key[2]:
                continue
            target = read_link(f"{fd_dir}/{name}")
        except OSError:
            continue
        if (os.major(st.st_dev), os.minor(st.st_dev)) == key[:2]:
            return target
        by_inode = by_inode or target
    return by_inode
