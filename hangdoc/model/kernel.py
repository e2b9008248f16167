"""What a process of the job sleeps on in the kernel, and who could end the wait: a file lock and
its holder (/proc/locks), a pipe and the processes that hold its write end (their descriptors)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FileLock:
    """A file lock a process waits for, from /proc/locks, with the process that holds it."""

    kind: str                      # "FLOCK", "POSIX", "OFDLCK"
    mode: str                      # "WRITE" or "READ"
    inode: str                     # "fe:00:2147933": device major:minor (hex) and inode, as /proc/locks says
    path: str | None = None        # the locked file, found among the waiter's open files
    holder_pid: int | None = None  # the pid /proc/locks names as holding it (None: not shown, an OFD lock)
    holder_cmdline: tuple[str, ...] = ()   # the holder's command line, redacted


# The kernel functions a process blocked on a file lock sleeps in (/proc/PID/wchan): flock(2) and
# fcntl(F_SETLKW), which lockf(3) calls.
FILE_LOCK_WCHANS = frozenset({
    "locks_lock_inode_wait", "flock_lock_inode_wait", "locks_lock_file_wait", "fcntl_setlk",
    "do_lock_file_wait", "posix_lock_inode_wait", "__x64_sys_flock", "__arm64_sys_flock", "__do_sys_flock",
})


# The kernel functions a process waiting for a child of its own sleeps in (wait4, waitpid, waitid).
CHILD_WAIT_WCHANS = frozenset({"do_wait", "kernel_wait4", "wait_consider_task"})


# The kernel functions a process asleep reading an empty pipe or FIFO sleeps in (/proc/PID/wchan):
# pipe_wait before Linux 5.6, pipe_read since, anon_pipe_read since 6.15.
PIPE_READ_WCHANS = frozenset({"pipe_read", "anon_pipe_read", "fifo_pipe_read", "pipe_wait", "pipe_wait_readable"})


@dataclass(frozen=True)
class PipeEnd:
    """A descriptor open for writing on a pipe or FIFO (its fdinfo flags O_WRONLY or O_RDWR), and
    the process that holds it, by its pid on the node (as /proc names it)."""

    pid: int
    fd: int


@dataclass(frozen=True)
class PipeRead:
    """The pipe or FIFO a process sleeps reading: the descriptor its read(2) was called on
    (/proc/PID/syscall), what that descriptor is, and every process of the node seen holding the
    pipe's write end, itself included. The kernel ends the read with EOF once no process holds one."""

    fd: int
    target: str                    # "pipe:[88123]", or a FIFO's path ("/tmp/x.fifo", "... (deleted)")
    # Every write end held on the node (at most MAX_PIPE_WRITERS); None: the node's descriptors were not read.
    writers: tuple[PipeEnd, ...] | None = None
    unread: int = 0                # processes of the node whose descriptors could not be read (another user's)

    @property
    def sealed(self) -> bool:
        """No process can open it anew: an anonymous pipe, or a FIFO whose path is gone (a FIFO
        that still has its path can be opened for writing by any process at any time)."""
        return self.target.startswith("pipe:[") or self.target.endswith(" (deleted)")


MAX_PIPE_WRITERS = 16
