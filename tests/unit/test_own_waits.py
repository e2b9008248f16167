"""Hangs in the job's own code, not its data: a pdb prompt, a file lock, a child process, a dead
helper thread. Each is classified as a wait, gets a rule with a cause and a fix of its own that
points at the user's file:line, and the generic straggler advice stands back for it."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from factories import ALL_REDUCE, DATALOADER_WAIT, frame, wait_until
from hangdoc.analyze.classify import classify_rank, classify_worker, own_frame
from hangdoc.analyze.progress import WAIT_STATES
from hangdoc.base.serde import to_json
from hangdoc.bundle.files import load_bundle, save_bundle
from hangdoc.collect.locks import lock_waits, parse_locks
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.snapshot import Probes, _with_lock_holders, capture
from hangdoc.model import (
    BUNDLE_SCHEMA, Bundle, Cause, FdLink, FileLock, Frame, GpuState, Host, IoCounters, Job, LogTail, Options,
    ProcessInfo, ProcSample, ProcStat, RankState, Role, Snapshot, Stack, Thread, ThreadCounters, Wait, WorkerState,
)
from hangdoc.report import judge
from hangdoc.rules import slugs
from hangdoc.rules.samples import chain

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "bundle.json").is_file())
OWN_RULES = set(slugs(Cause.OWN_CODE))   # the rules that name a wait in the rank's own code

SITE = "/opt/venv/lib/python3.11/site-packages/"
LIB = "/usr/lib/python3.11/"
JOB = "/work/train.py"
DATA = "/work/data.py"


TRAIN = (frame("train", JOB, 57), frame("main", JOB, 80), frame("<module>", JOB, 90))
PDB = (frame("Cmd.cmdloop", LIB + "cmd.py", 126), frame("Pdb._cmdloop", LIB + "pdb.py", 397),
       frame("Pdb.interaction", LIB + "pdb.py", 433), frame("Pdb.user_line", LIB + "pdb.py", 337),
       frame("Bdb.dispatch_line", LIB + "bdb.py", 114), frame("Bdb.trace_dispatch", LIB + "bdb.py", 90), *TRAIN)
RUN_UNDER_PDB = (frame("step", JOB, 30), *TRAIN, frame("<module>", "<string>", 1), frame("Bdb.run", LIB + "bdb.py", 600),
                 frame("Pdb._run", LIB + "pdb.py", 1720), frame("main", LIB + "pdb.py", 1790))
SUBPROCESS = (frame("Popen._try_wait", LIB + "subprocess.py", 2004), frame("Popen._wait", LIB + "subprocess.py", 2046),
              frame("Popen.wait", LIB + "subprocess.py", 1264), frame("Popen.communicate", LIB + "subprocess.py", 1201),
              frame("run", LIB + "subprocess.py", 550), frame("fetch_manifest", JOB, 33), *TRAIN)
HANDOFF = (frame("Condition.wait", LIB + "threading.py", 327), frame("Queue.get", LIB + "queue.py", 171),
           frame("next_batch", JOB, 44), *TRAIN)
PREFETCH = (frame("prefetch", JOB, 21), frame("Thread.run", LIB + "threading.py", 982),
            frame("Thread._bootstrap_inner", LIB + "threading.py", 1045),
            frame("Thread._bootstrap", LIB + "threading.py", 1002))
WORKER_GETITEM = (frame("Shards.__getitem__", DATA, 69),
                  frame("_MapDatasetFetcher.fetch", SITE + "torch/utils/data/_utils/fetch.py", 54),
                  frame("_worker_loop", SITE + "torch/utils/data/_utils/worker.py", 349),
                  frame("BaseProcess.run", LIB + "multiprocessing/process.py", 108),
                  frame("BaseProcess._bootstrap", LIB + "multiprocessing/process.py", 314), *TRAIN)
T0 = 1.7e9
RANK0, RANK1, WORKER, CHILD, GRANDCHILD, HOLDER = 100, 200, 201, 250, 251, 300


def stat(wchan: str | None = "futex_wait_queue", syscall: str | None = "202", *, state: str = "S",
         links: tuple[FdLink, ...] = (), locks: tuple[FileLock, ...] = ()) -> ProcStat:
    return ProcStat(state=state, wchan=wchan, syscall=syscall, utime_s=10.0, stime_s=1.0, rss_bytes=1 << 30,
                    num_threads=4, io=IoCounters(1000, 1000, 0, 0, 10, 10),
                    main_thread=ThreadCounters(10.0, 100, 5), fd_links=links, locks=locks)


def sample(pid: int, frames: tuple[Frame, ...] | None, proc: ProcStat | None = None, *,
           threads: tuple[Thread, ...] = (), active: bool = False, errors: tuple[str, ...] = ()) -> ProcSample:
    stack = None if frames is None else Stack((Thread(pid, "MainThread", active, active, frames), *threads))
    return ProcSample(pid, True, proc or stat(), stack, errors)


def info(pid: int, role: Role, rank: int | None, cmdline: tuple[str, ...] = ("python", "train.py"), *,
         ppid: int = 99, rank_pid: int | None = None, worker_index: int | None = None) -> ProcessInfo:
    return ProcessInfo(pid, ppid, role, cmdline, "/usr/bin/python3.11", T0 - 60, {}, rank, rank, 0, 2,
                       rank_pid if rank_pid is not None else pid, worker_index)


Round = Callable[[int], ProcSample]


def job_bundle(rank1: Round, *extra: tuple[ProcessInfo, Round], rank0: Round | None = None, rounds: int = 6,
               logs: tuple[LogTail, ...] = ()) -> Bundle:
    """Rank 0 waits in all_reduce, rank 1 does `rank1(k)` at round k (1 s apart); hang after 3 s."""
    procs = [(info(RANK0, Role.RANK, 0), rank0 or (lambda k: sample(RANK0, ALL_REDUCE))),
             (info(RANK1, Role.RANK, 1), rank1), *extra]
    snaps = tuple(Snapshot(T0 + k, 0.1, tuple(make(k) for _, make in procs), GpuState("unavailable", "no GPU"))
                  for k in range(rounds))
    job = Job("run", "localhost", 29500, 2, None, tuple(p for p, _ in procs))
    return Bundle(BUNDLE_SCHEMA, "0.1.0", T0 + rounds, Host("node0", "x86_64", "6.1", 2, "3.11", "2.13.0"), job, snaps,
                  logs=logs, options=Options(interval_s=1.0, hang_after_s=3.0))


def findings(bundle: Bundle) -> dict[str, list]:
    out: dict[str, list] = {}
    for found in judge(bundle).report.findings:
        out.setdefault(found.rule, []).append(found)
    return out


# --- classification ------------------------------------------------------------------------------


def test_a_rank_at_a_pdb_prompt_is_idle_in_the_debugger_at_its_own_line():
    # GIVEN a rank whose main thread sits in pdb's cmdloop under the job's train()
    reading = classify_rank(sample(RANK1, PDB, stat("anon_pipe_read", "0")))
    # THEN it waits (idle) at a pdb prompt, and the frame cited is the job's line, not cmd.py's
    assert (reading.state, reading.detail) == (RankState.IDLE, Wait.DEBUGGER)
    assert reading.frame.label == "train (train.py:57)"
    assert reading.state in WAIT_STATES


def test_a_program_running_under_pdb_is_not_at_a_prompt():
    # GIVEN `python -m pdb train.py` after `continue`: pdb's frames are the outermost ones, the job computes
    reading = classify_rank(sample(RANK1, RUN_UNDER_PDB, stat("0", "0", state="R"), active=True))
    # THEN it computes; no debugger prompt
    assert reading.state == RankState.COMPUTE and reading.detail != Wait.DEBUGGER


def test_a_rank_asleep_on_a_file_lock_waits_on_it():
    # GIVEN a rank whose own line called flock (invisible to py-spy): the kernel says locks_lock_inode_wait
    by_kernel = classify_rank(sample(RANK1, TRAIN, stat("locks_lock_inode_wait", "73")))
    # AND one read with --native, where libc's flock frame shows
    by_frame = classify_rank(sample(RANK1, (frame("flock", "libc.so.6", 0, native=True), *TRAIN), stat(None, None)))
    # THEN both wait on a file lock at train.py:57
    for reading in (by_kernel, by_frame):
        assert (reading.state, reading.detail) == (RankState.IDLE, Wait.FILE_LOCK)
        assert reading.frame.label == "train (train.py:57)"


def test_a_worker_asleep_on_flock_is_in_lock_wait_for_a_file_lock():
    # GIVEN a DataLoader worker in its dataset's __getitem__, the kernel in fcntl_setlk (lockf)
    reading = classify_worker(sample(WORKER, WORKER_GETITEM, stat("fcntl_setlk", "72")))
    # THEN it is in lock-wait on a file lock at the dataset's line
    assert (reading.state, reading.detail) == (WorkerState.LOCK_WAIT, Wait.FILE_LOCK)
    assert reading.frame.label == "Shards.__getitem__ (data.py:69)"


def test_a_rank_in_subprocess_run_or_os_system_waits_on_its_child():
    # GIVEN subprocess.run on the stack; and os.system (no Python frame: the kernel's do_wait)
    run = classify_rank(sample(RANK1, SUBPROCESS, stat("do_wait", "61")))
    system = classify_rank(sample(RANK1, TRAIN, stat("do_wait", "61")))
    # THEN both wait on a child, at the job's own line
    assert (run.state, run.detail, run.frame.label) == (RankState.IDLE, Wait.CHILD, "fetch_manifest (train.py:33)")
    assert (system.detail, system.frame.label) == (Wait.CHILD, "train (train.py:57)")


def test_a_rank_waiting_on_its_own_queue_is_in_a_thread_handoff_but_its_dataloader_wait_is_not():
    # GIVEN the job's line in queue.Queue.get; and a DataLoader wait (a multiprocessing queue)
    handoff = classify_rank(sample(RANK1, HANDOFF))
    loader = classify_rank(sample(RANK1, DATALOADER_WAIT))
    # THEN the first waits on a thread's handoff, the second stays a DataLoader wait
    assert (handoff.state, handoff.detail, handoff.frame.label) == (RankState.IDLE, Wait.THREAD, "next_batch (train.py:44)")
    assert loader.state == RankState.DATALOADER


def test_an_idle_rank_elsewhere_keeps_its_top_frame():
    # GIVEN a rank asleep at its own line in a futex (a threading.Lock taken twice)
    reading = classify_rank(sample(RANK1, TRAIN))
    # THEN idle at train, as before
    assert (reading.state, reading.detail) == (RankState.IDLE, "train")


def test_the_own_frame_is_the_innermost_frame_of_the_jobs_code():
    assert own_frame(PDB).label == "train (train.py:57)"
    assert own_frame(DATALOADER_WAIT).label == "train (train.py:198)"
    assert own_frame(ALL_REDUCE[:2]) is None


# --- collection ------------------------------------------------------------------------------------

LOCKS = """1: POSIX  ADVISORY  WRITE 28801 fe:00:2147933 0 EOF
1: -> POSIX  ADVISORY  WRITE 28802 fe:00:2147933 0 EOF
2: FLOCK  ADVISORY  WRITE 28799 fe:00:{inode} 0 EOF
2: -> FLOCK  ADVISORY  WRITE {waiter} fe:00:{inode} 0 EOF
3: OFDLCK ADVISORY  READ  -1 00:05:1234 0 EOF
garbage line
"""


def test_proc_locks_lines_parse_holders_and_waiters():
    lines = parse_locks(LOCKS.format(inode=77, waiter=28800))
    assert [(l.number, l.waiting, l.kind, l.mode, l.pid) for l in lines] == [
        ("1", False, "POSIX", "WRITE", 28801), ("1", True, "POSIX", "WRITE", 28802),
        ("2", False, "FLOCK", "WRITE", 28799), ("2", True, "FLOCK", "WRITE", 28800),
        ("3", False, "OFDLCK", "READ", None)]


def fake_proc(root: Path, locked: Path, waiter: int = 4100) -> ProcFS:
    """A /proc tree: locks naming `waiter` behind pid 28799, the waiter's fd 3 on `locked`."""
    st = os.stat(locked)
    root.mkdir()
    (root / "locks").write_text(LOCKS.format(inode=st.st_ino, waiter=waiter).replace(
        "fe:00", f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"))
    (root / str(waiter) / "fd").mkdir(parents=True)
    (root / str(waiter) / "fd" / "3").symlink_to(locked)
    (root / str(waiter) / "fd" / "0").symlink_to("pipe:[4242]")
    (root / "28799").mkdir()
    (root / "28799" / "cmdline").write_bytes(b"rsync\0--inplace\0/data/shard.lock\0")
    return ProcFS(root)


def test_lock_waits_name_the_holder_its_command_line_and_the_locked_path(tmp_path):
    # GIVEN /proc/locks with pid 4100 blocked behind pid 28799's flock on a file pid 4100 holds open
    locked = tmp_path / "shard.lock"
    locked.write_text("")
    procfs = fake_proc(tmp_path / "proc", locked)
    # WHEN the waits of pid 4100 are read
    found, error = lock_waits(procfs, {4100})
    # THEN one flock WRITE wait: the path, the holder's pid and its command line
    assert error is None
    [lock] = found[4100]
    assert (lock.kind, lock.mode, lock.path, lock.holder_pid) == ("FLOCK", "WRITE", str(locked), 28799)
    assert lock.holder_cmdline == ("rsync", "--inplace", "/data/shard.lock")


def test_an_unreadable_proc_locks_is_recorded_as_could_not_collect(tmp_path):
    # GIVEN a process asleep on a file lock and a /proc without a locks file
    (tmp_path / "proc").mkdir()
    procs = {4100: (stat("locks_lock_inode_wait", "73"), (), True), 4101: (stat(), (), True)}
    # WHEN the capture adds the lock holders
    out = _with_lock_holders(ProcFS(tmp_path / "proc"), procs)
    # THEN the waiter's sample says why there is no holder, the other process is untouched
    assert out[4100][1] == ("locks: could not collect: /proc/locks: No such file or directory",)
    assert out[4101][1] == () and out[4100][0].locks == ()


def test_fd_links_name_pipes_fifos_and_devices_but_not_regular_files(tmp_path):
    # GIVEN a process's fd dir: a pipe, /dev/null, a FIFO and a regular file
    fifo, plain = tmp_path / "x.fifo", tmp_path / "data.bin"
    os.mkfifo(fifo)
    plain.write_text("x")
    fd = tmp_path / "proc" / "7" / "fd"
    fd.mkdir(parents=True)
    for n, target in ((0, "pipe:[11]"), (1, "/dev/null"), (3, str(fifo)), (4, str(plain))):
        (fd / str(n)).symlink_to(target)
    procfs = ProcFS(tmp_path / "proc")
    # WHEN all are named, and stdin alone
    # THEN the regular file is left to open_files
    assert procfs.fd_links(7) == (FdLink(0, "pipe:[11]", "pipe"), FdLink(1, "/dev/null", "device"),
                                  FdLink(3, str(fifo), "fifo"))
    assert procfs.fd_links(7, (0,)) == (FdLink(0, "pipe:[11]", "pipe"),)


def test_a_capture_of_real_processes_names_the_flock_holder_and_what_a_child_waits_on(tmp_path):
    # GIVEN a process holding an flock, a "rank" blocked on it, and a child of the job blocked opening a FIFO
    lock, held, fifo = tmp_path / "shard.lock", tmp_path / "held", tmp_path / "never.fifo"
    os.mkfifo(fifo)
    holder_code = ("import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
                   "fcntl.flock(fd, fcntl.LOCK_EX)\nopen(sys.argv[2], 'w').close()\ntime.sleep(60)\n")
    started = []
    try:
        holder = subprocess.Popen([sys.executable, "-c", holder_code, str(lock), str(held)])
        started.append(holder)
        assert wait_until(held.exists)
        waiter = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys\n"
                                   "fcntl.flock(os.open(sys.argv[1], os.O_RDWR), fcntl.LOCK_EX)", str(lock)])
        started.append(waiter)
        cat = subprocess.Popen(["cat", str(fifo)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        started.append(cat)
        procfs = ProcFS()
        if not wait_until(lambda: procfs.proc_stat(waiter.pid).in_file_lock):
            pytest.skip(f"this kernel does not name the lock wait (wchan {procfs.proc_stat(waiter.pid).wchan!r})")
        infos = (info(waiter.pid, Role.RANK, 0), info(cat.pid, Role.CHILD, None, ("cat", str(fifo)), rank_pid=waiter.pid))
        # as discovery finds them: each with its start time (a pid that started otherwise is another process)
        job = Job(None, None, None, 1, None, tuple(dataclasses.replace(p, start_time=procfs.stat(p.pid).start_time)
                                                   for p in infos))
        # WHEN hangdoc captures them (no stack engine)
        snapshot, _ = capture(job, Probes(pyspy=None))
        # THEN the rank's sample names the lock, its path, its holder and the holder's command line
        rank = snapshot.sample_of(waiter.pid)
        [found] = rank.proc.locks
        assert (found.kind, found.path, found.holder_pid) == ("FLOCK", str(lock), holder.pid)
        assert found.holder_cmdline[:2] == (sys.executable, "-c")
        # AND the child's sample says what it waits on (its wchan) and what it holds (stdin /dev/null)
        child = snapshot.sample_of(cat.pid)
        assert child.proc.wchan and child.proc.wchan != "0"
        assert FdLink(0, "/dev/null", "device") in child.proc.fd_links
        assert rank.proc.fd_links and rank.proc.fd_links[0].fd == 0
    finally:
        for proc in started:
            proc.kill()
            proc.wait(5)


def test_fd_links_and_file_locks_round_trip_through_both_bundle_formats(tmp_path):
    # GIVEN a bundle whose samples carry descriptors and a lock wait
    lock = FileLock("FLOCK", "WRITE", "fe:00:77", "/data/shard.lock", 300, ("rsync", "/data"))
    links = (FdLink(0, "pipe:[11]", "pipe"), FdLink(3, "/tmp/x.fifo", "fifo"))
    bundle = job_bundle(lambda k: sample(RANK1, TRAIN, stat("locks_lock_inode_wait", "73", links=links, locks=(lock,))))
    # WHEN saved as v2 (.json.zst) and as v1 JSON and read back
    v2 = load_bundle(save_bundle(bundle, tmp_path / "b.json.zst"))
    (tmp_path / "v1.json").write_bytes(to_json(bundle))
    v1 = load_bundle(tmp_path / "v1.json")
    # THEN both are the same bundle, fields and all
    assert v2 == bundle == v1
    assert v2.last.sample_of(RANK1).proc.locks == (lock,) and v1.last.sample_of(RANK1).proc.fd_links == links


def test_an_older_bundle_without_them_reads_with_empty_defaults():
    # GIVEN a golden bundle recorded before these fields existed THEN it reads, with none of them
    bundle = load_bundle(GOLDEN / "bz2-shards" / "bundle.json")
    procs = [s.proc for snap in bundle.samples for s in snap.processes if s.proc is not None]
    assert procs and all(p.fd_links == () and p.locks == () for p in procs)


# --- the rules -------------------------------------------------------------------------------------


def test_a_rank_left_at_a_breakpoint_gets_debugger_prompt_and_the_straggler_stands_back():
    # GIVEN rank 1 at a pdb prompt (its stdin a pipe nobody writes), rank 0 in all_reduce, for 5 s
    pipe = (FdLink(0, "pipe:[4242]", "pipe"),)
    found = findings(job_bundle(lambda k: sample(RANK1, PDB, stat("anon_pipe_read", "0", links=pipe))))
    # THEN debugger-prompt names rank 1, the user's file:line, and what stdin is; its fix is its own
    [prompt] = found["debugger-prompt"]
    assert prompt.ranks == (1,) and "at train.py:57" in prompt.title and "pdb prompt" in prompt.title
    assert any("stdin (fd 0) is a pipe (pipe:[4242]), not a terminal" in e for e in prompt.evidence)
    assert any("train (train.py:57)" in e and "Cmd.cmdloop" in e for e in prompt.evidence)
    assert "PYTHONBREAKPOINT=0" in prompt.fix and "train.py:57" in prompt.fix
    # AND the generic straggler keeps its evidence but points at that fix, not at the data
    [straggler] = found["collective-straggler"]
    assert "balance its data or work" not in straggler.fix and "debugger-prompt" in straggler.fix


def flock_worker_bundle(*, locks: tuple[FileLock, ...] = (), errors: tuple[str, ...] = ()) -> Bundle:
    worker = info(WORKER, Role.WORKER, 1, ppid=RANK1, rank_pid=RANK1, worker_index=0)
    holder = info(HOLDER, Role.CHILD, 0, ("python", "sync_shards.py", "--hold"), ppid=RANK0, rank_pid=RANK0)
    return job_bundle(
        lambda k: sample(RANK1, DATALOADER_WAIT),
        (worker, lambda k: sample(WORKER, WORKER_GETITEM, stat("locks_lock_inode_wait", "73", locks=locks),
                                  errors=errors)),
        (holder, lambda k: sample(HOLDER, None, stat("hrtimer_nanosleep", "230"))))


def test_a_worker_blocked_on_flock_names_the_locked_file_the_holder_and_its_own_line():
    # GIVEN rank 1's worker asleep on an flock that rank 0's child (sync_shards.py) holds
    lock = FileLock("FLOCK", "WRITE", "fe:00:77", "/data/shard.lock", HOLDER, ("python", "sync_shards.py", "--hold"))
    found = findings(flock_worker_bundle(locks=(lock,)))
    # THEN file-lock-wait: rank 1, the path, the holder pid and command line, the dataset's line
    [wait] = found["file-lock-wait"]
    assert wait.ranks == (1,)
    assert "worker 0" in wait.title and "at data.py:69" in wait.title
    assert "/data/shard.lock" in wait.title and f"pid {HOLDER}" in wait.title
    assert any(f"held by pid {HOLDER} (a child process of rank 0): python sync_shards.py --hold" in e
               for e in wait.evidence)
    assert any("wchan locks_lock_inode_wait" in e for e in wait.evidence)
    assert "sync_shards.py" in wait.fix and "timeout" in wait.fix
    # AND it is not a fork-inherited futex deadlock, and the straggler stands back
    assert "worker-deadlock" not in found
    assert "file-lock-wait" in found["collective-straggler"][0].fix


def test_a_file_lock_whose_holder_cannot_be_read_says_why():
    # GIVEN the same wait, /proc/locks unreadable at capture time
    found = findings(flock_worker_bundle(errors=("locks: could not collect: /proc/locks: Permission denied",)))
    # THEN the finding stands, and says why no holder is named
    [wait] = found["file-lock-wait"]
    assert any("could not name the holder: /proc/locks: Permission denied" in e for e in wait.evidence)


def test_a_lock_seen_only_in_a_native_frame_says_proc_locks_was_not_consulted():
    # GIVEN `watch --native` showing libc's flock under rank 1's line, the kernel's wait not read
    native = (frame("flock", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0, native=True), *TRAIN)
    found = findings(job_bundle(lambda k: sample(RANK1, native, stat(None, None))))
    # THEN file-lock-wait still names rank 1 and its line, and says the holder was not looked up
    [wait] = found["file-lock-wait"]
    assert "at train.py:57" in wait.title and "a lock on a file" in wait.title
    assert any("/proc/locks was not consulted" in e for e in wait.evidence)


def child_bundle(*kids: tuple[ProcessInfo, Round]) -> Bundle:
    return job_bundle(lambda k: sample(RANK1, SUBPROCESS, stat("do_wait", "61")), *kids)


def test_a_rank_waiting_on_cat_of_a_fifo_names_the_child_and_what_it_waits_for():
    # GIVEN rank 1 in subprocess.run(["cat", fifo]); cat blocked opening the FIFO
    cat = info(CHILD, Role.CHILD, 1, ("cat", "/tmp/job/manifest.fifo"), ppid=RANK1, rank_pid=RANK1)
    null = (FdLink(0, "/dev/null", "device"),)
    found = findings(child_bundle((cat, lambda k: sample(CHILD, None, stat("wait_for_partner", "257", links=null)))))
    # THEN child-process-wait: the child's pid and command line, what it is blocked in, the rank's line
    [wait] = found["child-process-wait"]
    assert wait.ranks == (1,) and "at train.py:33" in wait.title
    assert f"child pid {CHILD} (cat manifest.fifo)" in wait.title and "blocked opening a FIFO" in wait.title
    assert any("cat /tmp/job/manifest.fifo" in e for e in wait.evidence)
    assert any("wchan wait_for_partner" in e and "no process has opened its other end" in e for e in wait.evidence)
    assert any("fd 0 /dev/null" in e for e in wait.evidence)
    assert "timeout=60" in wait.fix and "FIFO" in wait.fix
    assert "child-process-wait" in found["collective-straggler"][0].fix


def test_a_shell_child_is_followed_to_the_grandchild_that_blocks():
    # GIVEN subprocess.run("sh -c 'cat manifest.fifo'"): sh waits for cat, cat reads a pipe nobody writes
    sh = info(CHILD, Role.CHILD, 1, ("sh", "-c", "cat manifest.fifo"), ppid=RANK1, rank_pid=RANK1)
    cat = info(GRANDCHILD, Role.CHILD, 1, ("cat", "manifest.fifo"), ppid=CHILD, rank_pid=RANK1)
    found = findings(child_bundle((sh, lambda k: sample(CHILD, None, stat("do_wait", "61"))),
                                  (cat, lambda k: sample(GRANDCHILD, None, stat("anon_pipe_read", "0")))))
    # THEN the finding names cat, the one really blocked, and both are in the evidence
    [wait] = found["child-process-wait"]
    assert f"child pid {GRANDCHILD} (cat manifest.fifo)" in wait.title and "reading a pipe" in wait.title
    assert any(e.startswith(f"child pid {CHILD} ") for e in wait.evidence)


def test_a_child_wait_without_a_child_in_sight_still_names_the_rank_and_its_line():
    found = findings(child_bundle())
    [wait] = found["child-process-wait"]
    assert "at train.py:33" in wait.title and any("no child of rank 1" in e for e in wait.evidence)


def handoff_bundle(prefetch_alive_until: int, logs: tuple[LogTail, ...] = ()) -> Bundle:
    """Rank 1 waits in Queue.get; its 'prefetch' thread is in its stacks up to round `prefetch_alive_until`."""
    def rank1(k: int) -> ProcSample:
        threads = (Thread(RANK1 + 7, "prefetch", False, False, PREFETCH),) if k <= prefetch_alive_until else ()
        return sample(RANK1, HANDOFF, threads=threads)
    return job_bundle(rank1, logs=logs)


TRACEBACK = LogTail("job.log", (
    "step 40",
    "Exception in thread prefetch:",
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner',
    "    self.run()",
    '  File "/work/train.py", line 23, in prefetch',
    '    raise RuntimeError("shard 7 is corrupt")',
    "RuntimeError: shard 7 is corrupt",
))


def test_a_dead_prefetch_thread_is_named_with_its_exception_and_the_line_that_waits_for_it():
    # GIVEN rank 1 in Queue.get, its prefetch thread seen in rounds 0-1 and gone since, the log's traceback
    found = findings(handoff_bundle(1, logs=(TRACEBACK,)))
    # THEN helper-thread-died names the thread, the exception and both lines
    [died] = found["helper-thread-died"]
    assert died.ranks == (1,) and "at train.py:44" in died.title and "'prefetch'" in died.title
    assert "RuntimeError: shard 7 is corrupt" in died.title
    assert any("last seen" in e and "prefetch (train.py:21)" in e for e in died.evidence)
    assert any("prefetch (work/train.py:23)" in e for e in died.evidence)
    assert "is_alive" in died.fix
    assert "helper-thread-died" in found["collective-straggler"][0].fix


def test_a_thread_the_log_says_died_counts_even_when_never_seen_alive():
    # GIVEN the watch attached after the thread died: never in a stack, but the log has its traceback
    found = findings(handoff_bundle(-1, logs=(TRACEBACK,)))
    [died] = found["helper-thread-died"]
    assert any("the log says it died" in e for e in died.evidence)


def test_a_rank_waiting_on_a_live_thread_has_no_dead_helper():
    # GIVEN the prefetch thread still in every stack (slow, not dead), no traceback
    found = findings(handoff_bundle(99))
    # THEN no helper-thread-died; the generic straggler keeps its own advice
    assert "helper-thread-died" not in found
    assert "balance its data or work" in found["collective-straggler"][0].fix


def test_every_rank_at_a_prompt_is_frozen_and_no_progress_stands_back():
    # GIVEN both ranks at a pdb prompt: nothing moves, no collective
    bundle = job_bundle(lambda k: sample(RANK1, PDB, stat("anon_pipe_read", "0")),
                        rank0=lambda k: sample(RANK0, PDB, stat("anon_pipe_read", "0")), rounds=8)
    found = findings(bundle)
    # THEN debugger-prompt for both ranks, and no-progress points at it
    assert sorted(r for f in found["debugger-prompt"] for r in f.ranks) == [0, 1]
    assert "debugger-prompt" in found["no-progress"][0].fix and "Ranks 0, 1 are" in found["no-progress"][0].fix


OTHER_CAUSES = [c for c in CASES if not OWN_RULES & set(json.loads((GOLDEN / c / "expected.json").read_text())["fire"])]


@pytest.mark.parametrize("name", OTHER_CAUSES)
def test_none_of_them_fires_on_a_golden_hang_or_healthy_job_of_another_cause(name):
    # GIVEN a golden bundle (data stalls, compute stragglers, mismatches, healthy runs) THEN none fires
    bundle = load_bundle(GOLDEN / name / "bundle.json")
    assert not OWN_RULES & set(findings(bundle)), name


# --- the stack excerpt ----------------------------------------------------------------------------


def test_a_stack_excerpt_reaches_the_users_line_when_it_lies_deep():
    # GIVEN a DataLoader wait (the job's line is the 9th frame) and an all_reduce (the 4th)
    deep, shallow = chain(DATALOADER_WAIT), chain(ALL_REDUCE)
    # THEN the excerpt counts the frames between and ends at the job's line; a shallow one is as before
    assert deep.endswith("<- _MultiProcessingDataLoaderIter._try_get_data (torch/utils/data/dataloader.py:1251)"
                         " <- ... (3 frames) <- train (train.py:198)")
    assert deep.count(" <- ") == 6
    assert shallow == " <- ".join(f.label for f in ALL_REDUCE[:6])


def test_one_frame_too_deep_is_shown_rather_than_counted():
    frames = (*PDB[:6], *TRAIN)       # the job's line is the 7th frame
    assert chain(frames) == " <- ".join(f.label for f in frames[:7])


def test_reading_is_unchanged_for_a_copy():
    # a Reading's detail compares as its string: the digest saved to disk reads back equal
    reading = classify_rank(sample(RANK1, PDB))
    assert reading.detail == "pdb prompt" and dataclasses.replace(reading).detail == Wait.DEBUGGER
