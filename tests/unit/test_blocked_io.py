"""A worker blocked in open() (a dead mount; here a FIFO no one writes, which blocks the same way
in the kernel) is named as blocked opening its path, not idle; system calls are named by name."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest

from hangdoc.analyze.classify import classify_worker
from hangdoc.base.syscalls import syscall_name
from hangdoc.collect import procfs as procfs_mod
from hangdoc.collect.procfs import ProcFS
from hangdoc.model import Frame, ProcSample, Stack, Thread, WorkerState


@pytest.fixture
def opener(tmp_path):
    """A real process asleep in open() on a FIFO with no writer; killed whatever happens."""
    fifo = tmp_path / "mnt" / "shard-dead.tar"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-c", f"open({str(fifo)!r}, 'rb')"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if open(f"/proc/{proc.pid}/wchan").read() == "wait_for_partner":
                    break
            except OSError:
                pass
            time.sleep(0.02)
        yield proc.pid, str(fifo)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _worker_sample(pid, proc) -> ProcSample:
    frames = (Frame("load", "/job/train.py", "train.py", 92),
              Frame("_worker_loop", "/t/torch/utils/data/_utils/worker.py", "torch/utils/data/_utils/worker.py", 374))
    return ProcSample(pid=pid, alive=True, proc=proc,
                      stack=Stack(threads=(Thread(tid=pid, name="MainThread", active=False, owns_gil=False,
                                                  frames=frames),)))


@pytest.mark.timeout(30)
def test_a_process_blocked_opening_a_fifo_is_read_with_its_path(opener):
    # GIVEN a real process asleep in open() on a FIFO no one writes
    pid, path = opener
    # WHEN /proc is read as a watch round reads it
    stat = ProcFS().proc_stat(pid)
    # THEN the call is named, and the path it opens read from its memory
    assert stat.syscall_name in ("openat", "open"), stat
    assert stat.syscall_path == path and stat.syscall_path_error is None
    # AND a DataLoader worker in that state is blocked opening the path, not idle
    reading = classify_worker(_worker_sample(pid, stat))
    assert (reading.state, reading.detail) == (WorkerState.BLOCKED, f"opening {path}")
    assert reading.frame.name == "load"


@pytest.mark.timeout(30)
def test_memory_that_cannot_be_read_says_it_needs_ptrace_rights(opener, monkeypatch):
    # GIVEN the kernel refusing /proc/PID/mem (no ptrace rights over the process)
    pid, _ = opener
    real_open = open

    def refuse(path, *args, **kw):
        if str(path).endswith("/mem"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kw)

    monkeypatch.setattr(procfs_mod, "open", refuse, raising=False)
    # WHEN the process is read
    stat = ProcFS().proc_stat(pid)
    # THEN the path is unknown and the reason says what rights it takes; the worker is still blocked
    assert stat.syscall_path is None and "ptrace rights" in stat.syscall_path_error
    reading = classify_worker(_worker_sample(pid, stat))
    assert (reading.state, reading.detail) == (WorkerState.BLOCKED, "opening a file")


def test_syscalls_are_named_on_both_architectures():
    # GIVEN the numbers /proc/PID/syscall shows on x86_64 and on aarch64
    # WHEN named THEN each architecture's own table answers, and an unknown number is None
    assert syscall_name("x86_64", "257") == "openat" and syscall_name("aarch64", "56") == "openat"
    assert syscall_name("x86_64", "202") == "futex" and syscall_name("aarch64", "98") == "futex"
    assert syscall_name("aarch64", "257") is None and syscall_name("riscv64", "56") is None
    assert syscall_name("x86_64", "running") is None


def test_a_worker_that_runs_through_an_open_is_not_blocked(opener):
    # GIVEN the same reading, but the worker's main thread active (py-spy: running)
    pid, _ = opener
    stat = ProcFS().proc_stat(pid)
    sample = _worker_sample(pid, stat)
    main = dataclasses.replace(sample.stack.threads[0], active=True)
    # WHEN classified THEN it is not called blocked
    assert classify_worker(dataclasses.replace(sample, stack=Stack(threads=(main,)))).state != WorkerState.BLOCKED
