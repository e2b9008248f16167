"""The budgets of what hangdoc reads from files it did not write (docs/bundle.md, "Budgets").

Bundles and Flight Recorder dumps travel in issues and CI artifacts; each is read within a
budget of bytes checked before anything is expanded, and a file beyond one is refused with one
line. Only regular files are read: a FIFO or a device named like a bundle is refused, never
waited on or read forever.
"""
from __future__ import annotations

import os
import signal
import stat
import time
from contextlib import contextmanager

from hangdoc.base.outputs import kind_of

MAX_WORLD = 1 << 20                # ranks, world sizes, nodes: far beyond the largest real jobs
MAX_BUNDLE_FILE_BYTES = 256 << 20  # a bundle file as stored (zstd or JSON)
MAX_BUNDLE_JSON_BYTES = 256 << 20  # its JSON once decompressed: 600 samples of 520 processes fit
MAX_BUNDLE_VALUES = 16_000_000     # JSON values in a bundle, counted before decoding
MAX_LOG_LINES = 10_000             # per log tail (hangdoc keeps 400, `run` 2,000)
MAX_LINE_CHARS = 16_384            # an output line kept (a 280 MB one cost 1.1 GB): its head and tail, the cut said
MAX_STACK_OUTPUT_BYTES = 64 << 20  # what a stack engine prints for one process (py-spy's JSON of 3,000 threads: ~10 MB)
MAX_BUNDLE_PROCESSES = 16_384      # processes in one bundle, a node's (the largest measured: 520), before decoding
MAX_STACK_FRAMES = 8_000_000       # frames of the stacks as the samples name them (8 x 8 ranks, 600 samples: 0.7 M)
MAX_TIME = 1e11                    # any time in a bundle, epoch seconds (the year 5138)
MAX_SECONDS = 1e9                  # a duration in a bundle (31 years)
MAX_DUMP_BYTES = 32 << 20          # a Flight Recorder dump file; a 2000-entry dump with frames is a few MB
MAX_DUMP_OBJECTS = 1_000_000       # values in a dump, a shared one counted each time it is used
MAX_DUMP_DEPTH = 64                # nesting of a dump (FR's own is 5 deep)
MAX_NUMBER = 1 << 63               # an integer read from a dump (a line, a size, a sequence number)
# `hangdoc check`: data lists, shards and checkpoints are read within the same kinds of budget
MAX_LIST_BYTES = 256 << 20         # a data list file
MAX_LIST_ENTRIES = 500_000         # lines of all lists together (a WeNet shard holds ~1,000 utterances)
MAX_LIST_DEPTH = 64                # nesting of a raw list's JSON line (WeNet's is 1)
MAX_CHECK_WORKERS = 1 << 18        # ranks x DataLoader workers modelled (--world-size x --num-workers)
MAX_MEMBER_BYTES = 1 << 30         # one tar member a sampled shard's header claims (an utterance is MBs)
MAX_SAMPLE_TAR_BYTES = 8 << 30     # a sampled compressed shard, decompressed to scratch
MAX_CHECKPOINT_OBJECTS = 1_000_000  # values in a loaded checkpoint outside tensors, shared ones at each use
MAX_CHECKPOINT_DEPTH = 64          # its nesting
# A checkpoint's pickle, walked as a stream before torch reads it whole: its bytes (an 800-tensor model
# and its Adam state: 137 KB) and the values its opcodes make, tensors' own records included (that
# one: 34,447).
MAX_CHECKPOINT_PICKLE_BYTES = 256 << 20
MAX_CHECKPOINT_PICKLE_VALUES = 8_000_000
CHECKPOINT_LOAD_SECONDS = 120      # torch.load's weights-only unpickler, in Python: a crafted file is slow


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
    return kind_of(mode) or "a regular file"


def require_regular(path: str | os.PathLike) -> os.stat_result:
    """The stat of `path` when it is a regular file (a link to one is read through); TooLarge for a
    FIFO, socket, device or directory, checked before anything opens it (a FIFO would block)."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise TooLarge(f"not a regular file ({_kind(info.st_mode)}), not read")
    return info


def open_regular(path: str | os.PathLike):
    """`path` opened for binary reading when it is a regular file: TooLarge for a FIFO, socket or
    device, by its type before opening, and again by what was opened (non-blocking, so nothing waits)."""
    require_regular(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise TooLarge(f"not a regular file ({_kind(mode)}), not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def within_values(raw: object, max_objects: int, max_depth: int, leaf=lambda value: False) -> None:
    """TooLarge when a decoded value holds more than `max_objects` values or nests deeper than
    `max_depth`. A value shared by reference (a pickle's memo) counts each time it is used, as a copy
    or a walk would meet it: 400 KB of pickle can name one entry 200,000 times. `leaf(value)`: a
    value not looked into (a tensor)."""
    seen = 0
    todo = [(raw, 1)]
    while todo:
        value, depth = todo.pop()
        seen += 1
        if seen > max_objects:
            raise TooLarge(f"more than {max_objects:,} values (shared ones counted at each use)")
        if leaf(value):
            continue
        if isinstance(value, dict):
            children = [*value.keys(), *value.values()]
        elif isinstance(value, (list, tuple, set, frozenset)):
            children = value
        else:
            continue
        if depth >= max_depth and children:
            raise TooLarge(f"nested more than {max_depth} deep")
        if seen + len(todo) + len(children) > max_objects:
            raise TooLarge(f"more than {max_objects:,} values (shared ones counted at each use)")
        todo.extend((child, depth + 1) for child in children)


@contextmanager
def time_budget(seconds: float, what: str):
    """TooLarge when the block runs longer than `seconds` (SIGALRM, main thread only; elsewhere no
    budget). A timer already set (the fuzz's own) keeps running and is set again after."""
    def expired(signum, frame):
        raise TooLarge(f"{what} took more than {seconds:g} s")

    try:
        old_handler = signal.signal(signal.SIGALRM, expired)
    except ValueError:
        yield
        return
    began = time.monotonic()
    old_left, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_left:
            signal.setitimer(signal.ITIMER_REAL, max(old_left - (time.monotonic() - began), 0.001))


def cut_line(text: str, bound: int = MAX_LINE_CHARS, total: int | None = None) -> str:
    """`text` within `bound` characters: its head and its tail with the cut said between them.
    `total`: the line's whole length where `text` holds only its head and tail already."""
    total = len(text) if total is None else total
    if total <= bound and len(text) <= bound:
        return text
    half = max(1, (bound - 64) // 2)
    return f"{text[:half]} [... {total - 2 * half:,} characters cut ...] {text[-half:]}"
