"""The fallback stack engine: bloomberg's pystack, read in-process through its Python API.

`make bench` (section engines) measured it at about 20x py-spy's CPU per sample (it maps and
parses the process's libraries at every read), so py-spy stays the default; pystack is used
where py-spy is not installed or does not run (`--engine pystack`, or `auto` without py-spy).

Its threads are turned into py-spy's JSON shape (frames innermost first, locals as name,
repr, address) and go through the same parser, so the model, the loop marks and the worker
indices do not depend on the engine. What differs, and the report cannot tell:
- function names are the code object's name ("_next_data"), not py-spy's qualified name
  ("_MultiProcessingDataLoaderIter._next_data") on Python 3.11+; the classifiers accept both;
- pystack prints no address for strings, numbers and containers: their digest is taken over
  the printed value, so a list that grows in place counts as rebound (py-spy would not);
- native frames are not read (`--native` needs py-spy);
- a thread counts as active when it holds the GIL;
- a non-blocking read that meets memory changing under it is read again, stopped.

Measured on a torchrun rank (2-core x86_64): a read costs pystack 75-180 ms of CPU, with the
process stopped all along when blocking, where py-spy takes about 8 ms.
"""
from __future__ import annotations

import re
import time
import zlib
from dataclasses import dataclass
from typing import ClassVar

from hangdoc.collect.stacks import Dump, StackError, classify_failure, parse_dump, tracer_of

_ADDRESS = re.compile(r" at (0x[0-9a-fA-F]+)>$")


def available() -> bool:
    try:
        import pystack.engine  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class PyStack:
    """`dump` as PySpy's: one process's threads as a Dump, or a StackError saying why not."""

    name: ClassVar[str] = "pystack"
    parallel: int | None = 1    # it holds the GIL while it reads, and ptrace binds a tracee to one thread

    def dump(self, pid: int, native: bool = False, nonblocking: bool = False,
             worker_locals: bool = False, loop_locals: bool = False) -> Dump:
        from pystack import errors
        from pystack.engine import get_process_threads

        started = time.monotonic()
        want_locals = worker_locals or loop_locals
        try:
            try:
                data = _read(get_process_threads, pid, not nonblocking, want_locals)
            except errors.EngineError:
                if not nonblocking:
                    raise
                # Read while the process runs, pystack often meets a pointer that moved under it
                # ("Invalid address in remote process"): read it again, stopped.
                data = _read(get_process_threads, pid, True, want_locals)
            if not _whole(data, pid):
                data = _read_again(get_process_threads, pid, want_locals, data, errors.PystackError)
        except errors.ProcessNotFound:
            raise StackError("gone", f"process {pid} exited during the dump") from None
        except (errors.InvalidPythonProcess, errors.NotEnoughInformation) as exc:
            raise StackError("not-python", f"pystack: {_one_line(exc)}") from None
        except (PermissionError, errors.PystackError, RuntimeError, OSError) as exc:
            raise classify_failure(pid, f"pystack: {_one_line(exc)}", tracer_of(pid)) from None
        return parse_dump(data, took_s=time.monotonic() - started, loop_locals=loop_locals)


def _main_frames(data: list[dict], pid: int) -> list[dict]:
    return next((t["frames"] for t in data if t["os_thread_id"] == pid), [])


def _whole(data: list[dict], pid: int) -> bool:
    """The main thread's read reaches its outermost frame, a `<module>` (the script's, runpy's
    `-m` module's, or a spawned child's `<string>`). pystack that fails on part of the interpreter's
    memory ("Failed to read PyObject data") leaves a thread with no frames, or only its innermost."""
    frames = _main_frames(data, pid)
    return bool(frames) and frames[-1]["name"] == "<module>"


def _read_again(get_process_threads, pid: int, want_locals: bool, first: list[dict], failure) -> list[dict]:
    """A read that stopped short, read once more with the process stopped; the deeper read is kept."""
    try:
        again = _read(get_process_threads, pid, True, want_locals)
    except failure:
        return first
    return again if len(_main_frames(again, pid)) > len(_main_frames(first, pid)) else first


def _read(get_process_threads, pid: int, stop: bool, want_locals: bool) -> list[dict]:
    return [_thread(t, pid) for t in get_process_threads(pid, stop_process=stop, locals=want_locals)]


def _thread(thread, pid: int) -> dict:
    frames = list(thread.frames)            # outermost first, shims left out
    return {
        "thread_name": "MainThread" if thread.tid == pid else (thread.name or ""),
        "os_thread_id": thread.tid,
        "active": thread.holds_the_gil > 0,
        "owns_gil": thread.holds_the_gil > 0,
        "frames": [_frame(f) for f in reversed(frames)],
    }


def _frame(frame) -> dict:
    values = {**(frame.arguments or {}), **(frame.locals or {})}
    return {
        "name": frame.code.scope,
        "filename": frame.code.filename,
        "line": frame.code.location.lineno,
        "locals": [_local(name, text) for name, text in values.items()] if values else None,
    }


def _local(name: str, text: str) -> dict:
    found = _ADDRESS.search(text)
    # No address printed (a str, an int, a container): the value stands in for the identity.
    return {"name": name, "repr": text, "addr": int(found.group(1), 16) if found else zlib.crc32(text.encode())}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__
