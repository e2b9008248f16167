"""The budgets of what hangdoc reads from files it did not write (docs/bundle.md, "Budgets").

Bundles and Flight Recorder dumps travel in issues and CI artifacts; each is read within a
budget of bytes checked before anything is expanded, and a file beyond one is refused with one
line. Only regular files are read: a FIFO or a device named like a bundle is refused, never
waited on or read forever.
"""
from __future__ import annotations

import os
import stat

MAX_WORLD = 1 << 20                # ranks, world sizes, nodes: far beyond the largest real jobs
MAX_BUNDLE_FILE_BYTES = 256 << 20  # a bundle file as stored (zstd or JSON)
MAX_BUNDLE_JSON_BYTES = 256 << 20  # its JSON once decompressed: 600 samples of 520 processes fit
MAX_BUNDLE_VALUES = 16_000_000     # JSON values in a bundle, counted before decoding
MAX_LOG_LINES = 10_000             # per log tail (hangdoc keeps 400, `run` 2,000)
MAX_TIME = 1e11                    # any time in a bundle, epoch seconds (the year 5138)
MAX_SECONDS = 1e9                  # a duration in a bundle (31 years)
MAX_DUMP_BYTES = 32 << 20          # a Flight Recorder dump file; a 2000-entry dump with frames is a few MB
MAX_DUMP_OBJECTS = 1_000_000       # values in a dump, a shared one counted each time it is used
MAX_DUMP_DEPTH = 64                # nesting of a dump (FR's own is 5 deep)
MAX_NUMBER = 1 << 63               # an integer read from a dump (a line, a size, a sequence number)


class TooLarge(Exception):
    """A file beyond a budget, or not a regular file; the message is one line without the path."""


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them; TooLarge beyond, or for a
    FIFO, socket or device (checked before opening; opened non-blocking, so nothing waits)."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise TooLarge(f"not a regular file ({_kind(info.st_mode)}), not read")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)     # what was opened, should the name have changed in between
        if not stat.S_ISREG(info.st_mode):
            raise TooLarge(f"not a regular file ({_kind(info.st_mode)}), not read")
        if info.st_size > limit:
            raise TooLarge(f"{info.st_size:,} bytes, more than the {limit:,} hangdoc reads")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"more than the {limit:,} bytes hangdoc reads")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a file"
