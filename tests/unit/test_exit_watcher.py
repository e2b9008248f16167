"""The exit watcher (hangdoc/collect/exits.py) on real child processes it does not reap, and on /proc trees
built in a folder: the status read from the zombie, the signal decoded, the OOM counters, the misses."""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from hangdoc.collect.exits import ExitWatcher
from hangdoc.model import GpuState, ProcSample, ProcStat, Snapshot

needs_pidfd = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no os.pidfd_open (Linux >= 5.3, Python >= 3.9)")


def spawn(code: str) -> int:
    """A child of this test that nobody reaps until the test says so (a zombie once it ends)."""
    return os.posix_spawn(sys.executable, [sys.executable, "-c", code], dict(os.environ))


def reap(pid: int) -> int:
    return os.waitpid(pid, 0)[1]


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@needs_pidfd
@pytest.mark.parametrize("code, exit_code, sig", [
    ("import sys, time; time.sleep(0.3); sys.exit(3)", 3, None),
    ("import time; time.sleep(0.3)", 0, None),
    ("import os, time; time.sleep(0.3); os.kill(os.getpid(), 9)", None, signal.SIGKILL),
    ("import os, time; time.sleep(0.3); os.abort()", None, signal.SIGABRT),
])
def test_a_child_that_is_not_reaped_is_read_as_a_zombie(code, exit_code, sig):
    # GIVEN a real child process, watched through its pidfd, that nobody reaps
    pid = spawn(code)
    watcher = ExitWatcher(background=False, clock=lambda: 42.0)
    try:
        watcher.watch(pid)
        # WHEN the watch loop waits (up to 10 s)
        began = time.monotonic()
        exits = watcher.wait(10.0)
        # THEN the wait ends as the child dies, and its status is read from /proc/PID/stat, still a zombie
        assert time.monotonic() - began < 5.0
        [record] = exits
        assert (record.pid, record.time, record.source) == (pid, 42.0, "zombie")
        assert (record.code, record.signal) == (exit_code, sig)
        assert record.told and record.failed == (exit_code != 0)
        assert state(pid) == "Z" and watcher.exits == (record,)
    finally:
        watcher.close()
        status = reap(pid)
    # and what hangdoc read is what waitpid says
    if sig is None:
        assert os.WEXITSTATUS(status) == exit_code
    else:
        assert os.WTERMSIG(status) == sig


@needs_pidfd
def test_the_background_thread_reads_the_exit_while_the_loop_is_busy():
    # GIVEN a child watched by the watcher's own thread, and a loop busy elsewhere when it dies
    pid = spawn("import time; time.sleep(0.2); raise SystemExit(7)")
    watcher = ExitWatcher()
    try:
        watcher.watch(pid)
        time.sleep(1.0)            # a long round: no wait() running
        # WHEN the loop next waits
        began = time.monotonic()
        exits = watcher.wait(10.0)
        # THEN the exit, read by the thread as it happened, ends the wait at once
        assert time.monotonic() - began < 0.5
        assert [(e.code, e.source) for e in exits] == [(7, "zombie")]
    finally:
        watcher.close()
        reap(pid)


@needs_pidfd
def test_a_quiet_process_exit_is_recorded_without_ending_the_wait():
    # GIVEN a DataLoader-worker-like process, watched without waking the loop
    pid = spawn("pass")
    watcher = ExitWatcher(background=False)
    try:
        watcher.watch(pid, wake=False)
        # WHEN the loop waits 1.5 s THEN it waits them out, and the exit is recorded all the same
        began = time.monotonic()
        exits = watcher.wait(1.5)
        assert time.monotonic() - began >= 1.4
        assert [(e.pid, e.code) for e in exits] == [(pid, 0)]
    finally:
        watcher.close()
        reap(pid)


@needs_pidfd
def test_a_process_reaped_before_the_read_is_unseen_and_says_why():
    # GIVEN a child whose parent (this test) reaps it before hangdoc reads it
    pid = spawn("raise SystemExit(1)")
    watcher = ExitWatcher(background=False)
    try:
        watcher.watch(pid)
        reap(pid)
        # WHEN the loop waits THEN the exit is recorded, its status unread, and the record says why
        [record] = watcher.wait(5.0)
        assert (record.source, record.code, record.signal, record.told) == ("unseen", None, None, False)
        assert "its parent reaped it before hangdoc could" in record.errors[0]
    finally:
        watcher.close()


def sample(pid: int, alive: bool, state: str = "S", rss: int = 0) -> ProcSample:
    proc = ProcStat(state=state, wchan=None, syscall=None, utime_s=0.0, stime_s=0.0, rss_bytes=rss, num_threads=1,
                    io=None)
    return ProcSample(pid, alive, proc if alive or state == "Z" else None)


def snapshot(t: float, *samples: ProcSample) -> Snapshot:
    return Snapshot(t, 0.0, samples, GpuState("unavailable", "test"))


def test_without_pidfds_the_samples_read_the_zombie_and_the_wait_is_a_sleep():
    # GIVEN no pidfd_open (an old kernel) and a real child that exits and is not reaped
    slept = []
    pid = spawn("import os; os.kill(os.getpid(), 11)")
    watcher = ExitWatcher(pidfd_open=None, sleep=slept.append)
    try:
        watcher.watch(pid)
        # WHEN the loop waits THEN it sleeps the whole delay (nothing can wake it)
        assert watcher.wait(2.0) == () and slept == [2.0]
        deadline = time.monotonic() + 10
        while state(pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        # and the next sample that finds it a zombie reads its status there
        watcher.observe(snapshot(9.0, sample(pid, True, rss=5 << 20)))
        watcher.observe(snapshot(10.0, sample(pid, False, state="Z")))
        [record] = watcher.exits
        assert (record.signal, record.source, record.time) == (signal.SIGSEGV, "zombie", 10.0)
        assert record.last_rss_bytes == 5 << 20
    finally:
        watcher.close()
        reap(pid)


# --- a /proc and a cgroup tree in a folder ---------------------------------------------------------


def fake_proc(root, pid: int, state: str, exit_status: int, start: int = 777, cgroup: str = "0::/job.slice/train\n"):
    folder = root / "proc" / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    fields = [state, "1", str(pid), str(pid)] + ["0"] * 15 + [str(start)] + ["0"] * 29 + [str(exit_status)]
    # written whole, as the kernel shows /proc: a reader never sees a half-written file
    (folder / "stat.new").write_text(f"{pid} (python) {' '.join(fields)}\n")
    os.replace(folder / "stat.new", folder / "stat")
    (folder / "cgroup").write_text(cgroup)
    uid = os.geteuid()
    (folder / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")


@pytest.mark.parametrize("layout", ["v2", "v1"])
def test_the_oom_counters_before_and_after_tell_an_oom_kill(tmp_path, layout):
    # GIVEN a process in a memory cgroup (v2 memory.events, or v1 memory.oom_control) and /proc/vmstat
    if layout == "v2":
        cgroup, counter = "0::/job.slice/train\n", tmp_path / "cg" / "job.slice" / "train" / "memory.events"
        text = "low 0\nhigh 0\nmax 12\noom {n}\noom_kill {n}\noom_group_kill 0\n"
    else:
        cgroup = "12:pids:/\n4:memory:/job/train\n0::/\n"
        counter = tmp_path / "cg" / "memory" / "job" / "train" / "memory.oom_control"
        text = "oom_kill_disable 0\nunder_oom 0\noom_kill {n}\n"
    counter.parent.mkdir(parents=True)
    counter.write_text(text.format(n=2))
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "vmstat").write_text("nr_free_pages 1\noom_kill 5\n")
    fake_proc(tmp_path, 4242, "S", 0, cgroup=cgroup)
    watcher = ExitWatcher(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    watcher.watch(4242)
    # WHEN the kernel's OOM killer strikes in the cgroup: SIGKILL, counter 2 -> 3, and the sample finds a zombie
    counter.write_text(text.format(n=3))
    fake_proc(tmp_path, 4242, "Z", signal.SIGKILL, cgroup=cgroup)
    watcher.observe(snapshot(5.0, sample(4242, False, state="Z")))
    # THEN the record has the signal and both counters, the cgroup's risen, the machine's not
    [record] = watcher.exits
    assert record.signal == signal.SIGKILL and record.oom_killed
    counts = {c.source: (c.before, c.after) for c in record.oom}
    assert counts == {str(counter): (2, 3), str(tmp_path / "proc" / "vmstat"): (5, 5)}
    watcher.close()


def test_a_pid_taken_by_a_newer_process_is_not_read_as_the_old_ones_exit(tmp_path):
    # GIVEN a watched process whose pid a newer process (another start time) holds, a zombie
    fake_proc(tmp_path, 4343, "S", 0, start=100)
    watcher = ExitWatcher(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    watcher.watch(4343)
    fake_proc(tmp_path, 4343, "Z", 1 << 8, start=200)
    # WHEN a sample finds the pid gone THEN its exit is unseen: the status belongs to the other process
    watcher.observe(snapshot(5.0, sample(4343, False, state="Z")))
    [record] = watcher.exits
    assert not record.told and "newer process" in record.errors[0]
    assert any("read only at the samples" in e for e in record.errors)
    watcher.close()


def test_a_zombies_exit_code_is_decoded_as_waitpid_does(tmp_path):
    # GIVEN zombies whose exit_code field says "exited 1", "SIGSEGV with a core dump"
    watcher = ExitWatcher(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    for pid in (10, 11):
        fake_proc(tmp_path, pid, "S", 0)
        watcher.watch(pid)
    fake_proc(tmp_path, 10, "Z", 1 << 8)
    fake_proc(tmp_path, 11, "Z", signal.SIGSEGV | 0x80)
    watcher.observe(snapshot(5.0, sample(10, False, state="Z"), sample(11, False, state="Z")))
    # THEN code 1; signal 11 with core_dumped
    got = {e.pid: (e.code, e.signal, e.core_dumped) for e in watcher.exits}
    assert got == {10: (1, None, False), 11: (None, signal.SIGSEGV, True)}
    watcher.close()


def test_an_exit_still_under_way_when_read_is_read_again_until_it_is_a_zombie(tmp_path):
    # GIVEN a watched process whose exit wakes hangdoc while its threads are still ending: /proc
    # says R for a few ms, then Z with its status (a rank with gloo and DataLoader threads; real
    # pidfds woke this early on this machine, and the rank read "unseen": ended, cause unknown)
    import threading

    fake_proc(tmp_path, 4545, "S", 0)
    watcher = ExitWatcher(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    watcher.watch(4545)
    fake_proc(tmp_path, 4545, "R", 0)
    threading.Timer(0.03, fake_proc, (tmp_path, 4545, "Z", 0)).start()
    # WHEN the sample that found it gone reads its exit at once
    watcher.observe(snapshot(5.0, sample(4545, False, state="R")))
    # THEN it waited for the zombie and read the exit 0
    [record] = watcher.exits
    assert record.told and record.code == 0 and record.source == "zombie", record.errors
    watcher.close()
