"""The stack engines' one interface (`StackReader.dump`) and the default engine, py-spy:
the only place that runs and parses it (pystack_engine.py is the fallback).

`py-spy dump --json` pauses the target for a few tens of milliseconds (unless
--nonblocking), reads its Python frames and lets it go: read-only. Dumps run in a
bounded thread pool, each under its own time limit.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Protocol

from hangdoc.collect.loopmark import loop_mark
from hangdoc.base.errors import PySpyMissing
from hangdoc.base.limits import MAX_STACK_OUTPUT_BYTES
from hangdoc.base.parse import to_int
from hangdoc.base.redact import redact_cached
from hangdoc.model import Frame, Stack, Thread

Runner = Callable[..., subprocess.CompletedProcess]


class StackError(Exception):
    """A dump that failed; `kind` is "denied", "gone", "not-python", "timeout" or "failed"."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Dump:
    stack: Stack
    worker_id: int | None = None      # from `_worker_loop`'s locals, when asked for
    num_workers: int | None = None


def find_py_spy(explicit: str | None = None) -> str:
    """py-spy next to this interpreter's scripts first (the wheel puts it there), then PATH."""
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit
        raise PySpyMissing()
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("py-spy")
    if found:
        return found
    raise PySpyMissing()


class StackReader(Protocol):
    """What a stack engine offers: one process's threads, or a StackError saying why not.
    `parallel`: how many dumps may run at once (None: as many as dump_many likes)."""

    name: ClassVar[str]          # recorded in the bundle's options
    parallel: int | None

    def dump(self, pid: int, native: bool = False, nonblocking: bool = False,
             worker_locals: bool = False, loop_locals: bool = False) -> Dump: ...


def bounded_run(cmd: list[str], capture_output: bool = True, text: bool = True, timeout: float | None = None,
                limit: int = MAX_STACK_OUTPUT_BYTES) -> subprocess.CompletedProcess:
    """`subprocess.run` for a stack engine, its output read up to `limit` bytes a stream as it comes
    (a py-spy that printed 600 MB took hangdoc to 5.3 GB): past it the engine is killed and the
    dump fails with one line. TimeoutExpired past `timeout`, as subprocess.run."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL) as proc:
        chunks: dict[str, list[bytes]] = {"out": [], "err": []}
        over = threading.Event()

        def drain(stream, into: list[bytes]) -> None:
            size = 0
            for block in iter(lambda: stream.read1(1 << 16), b""):
                size += len(block)
                if size > limit:
                    over.set()
                    proc.kill()
                    return
                into.append(block)

        readers = [threading.Thread(target=drain, args=(proc.stdout, chunks["out"]), daemon=True),
                   threading.Thread(target=drain, args=(proc.stderr, chunks["err"]), daemon=True)]
        for reader in readers:
            reader.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        for reader in readers:
            reader.join(5.0)
    if over.is_set():
        raise StackError("failed", f"{os.path.basename(cmd[0])} printed more than {limit >> 20} MiB for one process; "
                                   "its output was not read further")
    out, err = b"".join(chunks["out"]), b"".join(chunks["err"])
    if text:
        return subprocess.CompletedProcess(cmd, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    return subprocess.CompletedProcess(cmd, code, out, err)


@dataclass
class PySpy:
    name: ClassVar[str] = "py-spy"
    path: str
    timeout_s: float = 5.0
    run: Runner = bounded_run
    parallel: int | None = None

    def dump(self, pid: int, native: bool = False, nonblocking: bool = False,
             worker_locals: bool = False, loop_locals: bool = False) -> Dump:
        cmd = [self.path, "dump", "--pid", str(pid), "--json"]
        # py-spy reads native frames only from a paused process: a gentle (unpaused) read of a
        # stepping rank goes without them, and the rank that looks stuck is read paused, with them.
        native = native and not nonblocking
        if native:
            cmd.append("--native")
        if nonblocking:
            cmd.append("--nonblocking")
        if worker_locals or loop_locals:
            cmd.append("--locals")
        started = time.monotonic()
        try:
            done = self.run(cmd, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise StackError("timeout", f"py-spy took longer than {self.timeout_s:g} s") from None
        except OSError as exc:
            raise StackError("failed", f"the py-spy binary {self.path} does not run here "
                             f"({exc.strerror or exc}; wrong architecture or not a program?)") from None
        took = time.monotonic() - started
        if done.returncode != 0:
            if done.returncode < 0:
                raise StackError("failed", f"py-spy crashed (signal {-done.returncode}) while reading pid {pid}")
            raise classify_failure(pid, done.stderr or done.stdout, tracer_of(pid), state_of(pid))
        try:
            data = json.loads(done.stdout)
        except (json.JSONDecodeError, RecursionError):
            shown = " ".join((done.stdout or "").split())[:60]
            raise StackError("failed", f"py-spy printed something that is not its JSON ({shown!r}); "
                             f"is {self.path} really py-spy?") from None
        if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
            raise StackError("failed", "py-spy's JSON is not a list of threads; is this py-spy version supported?")
        try:
            return parse_dump(data, native=native, took_s=took, loop_locals=loop_locals)
        except (AttributeError, TypeError, ValueError) as exc:
            raise StackError("failed", f"py-spy's JSON could not be read: {exc}") from None


def tracer_of(pid: int, proc_root: str = "/proc") -> int | None:
    """The pid of the tracer (gdb, strace, another py-spy) holding `pid`, from /proc/PID/status."""
    try:
        with open(f"{proc_root}/{pid}/status") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    tracer = int(line.split()[1])
                    return tracer or None
    except (OSError, ValueError, IndexError):
        return None
    return None


def state_of(pid: int) -> str | None:
    """The process's state letter (/proc/PID/stat), None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
        return raw[raw.rindex(")") + 2:].split()[0]
    except (OSError, ValueError, IndexError):
        return None


def classify_failure(pid: int, text: str, tracer: int | None = None, state: str | None = None) -> StackError:
    # py-spy (Rust) may append its own backtrace: "Stack backtrace: 0: <E as anyhow::...>": not for users.
    text = text.split("Stack backtrace:", 1)[0]
    message = " ".join(text.strip().split())[:300] or "py-spy failed with no message"
    lowered = message.lower()
    if state == "T" or "sigstop" in lowered or "failed to suspend" in lowered:
        return StackError("stopped", f"process {pid} is stopped (state T: SIGSTOP, Ctrl-Z or a job-control stop), "
                          f"so its stack cannot be read; `kill -CONT {pid}` resumes it ({message})")
    if "permission denied" in lowered or "operation not permitted" in lowered:
        if tracer:
            return StackError("denied", f"ptrace refused: process {tracer} already traces pid {pid} "
                              f"(a debugger, strace or another py-spy; detach it): {message}")
        return StackError("denied", f"ptrace refused: {message}")
    if "no such process" in lowered or "no such file" in lowered:
        return StackError("gone", f"process {pid} exited during the dump")
    if "failed to find python" in lowered or "python interpreter" in lowered:
        return StackError("not-python", message)
    return StackError("failed", message)


def parse_dump(data: list[dict], native: bool = False, took_s: float = 0.0,
               loop_locals: bool = False) -> Dump:
    """Turn py-spy's JSON (a list of threads, frames innermost first) into a Stack.

    With `loop_locals` the main thread's locals become a LoopMark (digests and integers);
    no repr of a local is kept."""
    threads = []
    worker_id = num_workers = None
    for raw in data:
        frames = []
        for f in raw.get("frames") or ():
            filename = f.get("filename") or "?"
            frames.append(Frame(      # a script's path (a token-named directory), a name: redacted here
                name=redact_cached(f.get("name") or "?"),
                filename=redact_cached(filename),
                short_filename=redact_cached(f.get("short_filename") or filename),
                line=int(f.get("line") or 0),
                native=not filename.endswith(".py") and native,
            ))
            if f.get("name") == "_worker_loop" and f.get("locals"):
                values = {v.get("name"): v.get("repr") for v in f["locals"]}
                worker_id = to_int(values.get("worker_id"))
                num_workers = to_int(values.get("num_workers"))
        name = raw.get("thread_name") or ""
        threads.append(Thread(
            tid=int(raw.get("os_thread_id") or raw.get("thread_id") or 0),
            name=redact_cached(name),
            active=bool(raw.get("active")),
            owns_gil=bool(raw.get("owns_gil")),
            frames=tuple(frames),
            loop=loop_mark(raw.get("frames") or []) if loop_locals and name == "MainThread" else None,
        ))
    return Dump(Stack(threads=tuple(threads), native=native, took_s=round(took_s, 4)),
                worker_id, num_workers)


@dataclass(frozen=True)
class DumpRequest:
    pid: int
    native: bool = False
    nonblocking: bool = False
    worker_locals: bool = False
    loop_locals: bool = False


def dump_many(pyspy: StackReader, requests: list[DumpRequest], max_workers: int | None = None
              ) -> dict[int, Dump | StackError]:
    """Dump every process in parallel; each result is a Dump or the StackError it raised."""
    if not requests:
        return {}
    # py-spy spends most of a dump waiting on the target (attach, ptrace stops): run them all at once.
    workers = max_workers or pyspy.parallel or min(len(requests), 16)

    def one(req: DumpRequest) -> Dump | StackError:
        try:
            return pyspy.dump(req.pid, req.native, req.nonblocking, req.worker_locals, req.loop_locals)
        except StackError as exc:
            return exc

    if workers <= 1:
        return {req.pid: one(req) for req in requests}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="py-spy") as pool:
        return dict(zip((r.pid for r in requests), pool.map(one, requests)))
