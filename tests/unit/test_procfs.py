"""Reading /proc: a process that is going, or a kernel thread, is "gone", never a traceback."""
from __future__ import annotations

import errno
import os

import pytest

from hangdoc.collect import procfs as procfs_mod
from hangdoc.collect.procfs import ProcFS, ProcGone


@pytest.mark.parametrize("error", [ProcessLookupError(errno.ESRCH, "No such process"),
                                   FileNotFoundError(errno.ENOENT, "No such file")])
def test_a_file_that_cannot_be_opened_for_a_missing_process_reads_as_gone(monkeypatch, error):
    # GIVEN the kernel refusing the open (ESRCH: a kernel thread's environ, or a process exiting)
    def refuse(*_args, **_kw):
        raise error

    monkeypatch.setattr(procfs_mod.os, "open", refuse)
    # WHEN its environment is read
    # THEN the reader says the process is gone, which discovery skips
    with pytest.raises(ProcGone):
        ProcFS().environ(2)


def test_status_gives_memory_and_the_main_threads_switches():
    # GIVEN this very process
    # WHEN its /proc entry is read the way a watch round reads it
    stat = ProcFS().proc_stat(os.getpid(), full=False)
    # THEN the memory and the main thread's counters come from the one status read
    status = open(f"/proc/{os.getpid()}/status").read()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    assert abs(stat.rss_bytes - rss_kb * 1024) < 64 << 20
    assert stat.main_thread is not None and stat.main_thread.voluntary_switches >= 0
    assert not stat.full and stat.open_files == ()


def test_a_command_line_that_cannot_be_read_is_empty(tmp_path):
    # GIVEN a /proc tree holding only pid 5, and no pid at all (a rank without a launcher)
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "cmdline").write_bytes(b"torchrun\0--nproc_per_node=2\0train.py\0")
    procfs = ProcFS(tmp_path)
    # WHEN command lines are read without failing
    # THEN pid 5's is its words, and a gone pid, pid 0 or None read as ()
    assert procfs.cmdline_or_empty(5) == ("torchrun", "--nproc_per_node=2", "train.py")
    assert procfs.cmdline_or_empty(6) == procfs.cmdline_or_empty(0) == procfs.cmdline_or_empty(None) == ()


def test_a_process_s_allowed_cpus_and_its_run_queue_wait_are_read_with_each_sample():
    # GIVEN this process, pinned for the test to one of its CPUs
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        # WHEN its /proc entry is read the way every round reads it (even light)
        stat = ProcFS().proc_stat(os.getpid(), full=False)
    finally:
        os.sched_setaffinity(0, before)
    # THEN it may run on that CPU alone, and its main thread's run-queue wait is a figure
    assert stat.cpus_allowed == str(min(before)) and stat.allowed_cpus == frozenset({min(before)})
    assert stat.main_thread.runqueue_s is not None and stat.main_thread.runqueue_s >= 0


def test_a_kernel_cpu_list_parses_and_nonsense_is_left_out():
    from hangdoc.base.parse import cpu_list

    assert cpu_list("0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert cpu_list("x,5-2,,7") == frozenset({7})
    assert cpu_list("0-99999999") == frozenset()
