"""System calls by name: /proc/PID/syscall gives a number, and the numbers differ by architecture.

The table holds the calls a process of a training job is found asleep or blocked in; a number
it lacks is shown as the number alone.
"""
from __future__ import annotations

_X86_64 = {
    0: "read", 1: "write", 2: "open", 4: "stat", 5: "fstat", 6: "lstat", 7: "poll", 16: "ioctl",
    17: "pread64", 18: "pwrite64", 19: "readv", 20: "writev", 21: "access", 23: "select", 34: "pause",
    35: "nanosleep", 40: "sendfile", 42: "connect", 43: "accept", 44: "sendto", 45: "recvfrom",
    46: "sendmsg", 47: "recvmsg", 61: "wait4", 72: "fcntl", 73: "flock", 74: "fsync", 75: "fdatasync",
    85: "creat", 128: "rt_sigtimedwait", 130: "rt_sigsuspend", 202: "futex", 208: "io_getevents",
    217: "getdents64", 230: "clock_nanosleep", 232: "epoll_wait", 247: "waitid", 257: "openat",
    262: "newfstatat", 269: "faccessat", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait",
    288: "accept4", 295: "preadv", 299: "recvmmsg", 326: "copy_file_range", 327: "preadv2",
    332: "statx", 426: "io_uring_enter", 437: "openat2", 439: "faccessat2", 441: "epoll_pwait2",
    449: "futex_waitv",
}
# aarch64 uses the generic table: no open, creat, stat, poll or select (openat, ppoll, ... instead).
_AARCH64 = {
    4: "io_getevents", 22: "epoll_pwait", 25: "fcntl", 29: "ioctl", 32: "flock", 48: "faccessat",
    56: "openat", 61: "getdents64", 63: "read", 64: "write", 65: "readv", 66: "writev", 67: "pread64",
    68: "pwrite64", 69: "preadv", 71: "sendfile", 72: "pselect6", 73: "ppoll", 79: "newfstatat",
    80: "fstat", 82: "fsync", 83: "fdatasync", 95: "waitid", 98: "futex", 101: "nanosleep",
    115: "clock_nanosleep", 133: "rt_sigsuspend", 137: "rt_sigtimedwait", 202: "accept", 203: "connect",
    206: "sendto", 207: "recvfrom", 211: "sendmsg", 212: "recvmsg", 242: "accept4", 243: "recvmmsg",
    260: "wait4", 285: "copy_file_range", 286: "preadv2", 291: "statx", 426: "io_uring_enter",
    437: "openat2", 439: "faccessat2", 441: "epoll_pwait2", 449: "futex_waitv",
}
TABLES = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _AARCH64, "arm64": _AARCH64}

# The calls that open a file by path, and which argument (from 0) holds the path's address.
OPENS = {"open": 0, "creat": 0, "openat": 1, "openat2": 1}


def syscall_name(arch: str | None, number: str | int | None) -> str | None:
    """"openat" for ("x86_64", "257"); None for an architecture or number the table lacks."""
    try:
        return TABLES.get((arch or "").lower(), {}).get(int(number)) if number is not None else None
    except (TypeError, ValueError):
        return None
