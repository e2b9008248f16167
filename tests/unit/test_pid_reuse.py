"""A process is its pid and its start time: a rank that exits and whose pid another process takes (in a
pid namespace, where pids are few) is never read as that stranger; its exit stands. On a /proc tree
written in a folder, since a pid cannot be made to be reused for real."""
from __future__ import annotations

import io
import os
import select

from hangdoc.collect.discover import find_job
from hangdoc.collect.exits import ExitWatcher
from hangdoc.collect.logs import log_sources
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.snapshot import Probes, capture
from hangdoc.collect.stacks import Dump
from hangdoc.live.options import WatchOptions
from hangdoc.live.watcher import Watcher
from hangdoc.model import Stack, Thread
from hangdoc.render.text import render_text
from hangdoc.report.judge import judge
from tests.factories import _frames

BOOT = 1700000000
TRAIN = ("/usr/bin/python3", "-u", "train.py")
STRANGER = ("/usr/bin/python3", "-c", "import time; time.sleep(600)")
TRAINING = _frames(("all_reduce", "torch/distributed/distributed_c10d.py", 2500), ("train_step", "train.py", 40),
                   ("<module>", "train.py", 60))
STRANGERS = _frames(("<module>", "<string>", 1))


def write_proc(root, pid: int, ppid: int, cmdline: tuple[str, ...], env: dict[str, str] | None = None,
               state: str = "S", start_ticks: int = 500, exit_status: int = 0) -> None:
    """The files a sample reads of one process, as the kernel shows them (stat written whole)."""
    folder = root / str(pid)
    (folder / "fd").mkdir(parents=True, exist_ok=True)
    (folder / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
    fields = [state, str(ppid), str(pid), str(pid)] + ["0"] * 7 + ["100", "20"] + ["0"] * 4 + ["1", "0"] \
        + [str(start_ticks)] + ["0"] * 29 + [str(exit_status)]
    stat = f"{pid} (python3) {' '.join(fields)}\n"
    for path in (folder / "stat", folder / "task" / str(pid) / "stat"):
        path.with_suffix(".new").write_text(stat)
        os.replace(path.with_suffix(".new"), path)
    status = f"Name:\tpython3\nUid:\t{os.geteuid()}\t{os.geteuid()}\t{os.geteuid()}\t{os.geteuid()}\nVmRSS:\t1000 kB\n"
    (folder / "status").write_text(status)
    (folder / "task" / str(pid) / "status").write_text(status)
    (folder / "io").write_text("rchar: 10\nwchar: 0\n")
    (folder / "wchan").write_text("0")
    (folder / "syscall").write_text("running")
    (folder / "cmdline").write_bytes(b"\0".join(w.encode() for w in cmdline) + b"\0")
    (folder / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in (env or {}).items()) + b"\0")


def torchrun_job(root) -> None:
    """torchrun (pid 10) and its ranks 11 and 12, started at boot + 5 s."""
    (root / "stat").write_text(f"cpu 0 0 0 0\nbtime {BOOT}\n")
    write_proc(root, 10, 1, ("/usr/bin/python3", "/usr/bin/torchrun", "--nproc_per_node=2", "train.py"))
    for rank in (0, 1):
        write_proc(root, 11 + rank, 10, TRAIN, {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)})


class Engine:
    """A stack engine that reads whatever holds the pid now: the rank's frames, or the stranger's."""

    parallel = 2

    def __init__(self, root, during=None):
        self.root, self.during = root, during

    def dump(self, pid, native=False, nonblocking=False, worker_locals=False, loop_locals=False):
        if self.during is not None:
            self.during(pid)
        stranger = b"<string>" not in (self.root / str(pid) / "cmdline").read_bytes() and \
            b"sleep" in (self.root / str(pid) / "cmdline").read_bytes()
        frames = STRANGERS if stranger else TRAINING
        return Dump(Stack(threads=(Thread(tid=pid, name="MainThread", active=False, owns_gil=False,
                                           frames=frames),)))


def test_a_pid_taken_by_another_process_is_not_sampled_as_the_rank(tmp_path):
    # GIVEN a job found with its ranks; then rank 1 (pid 12) exits and an unrelated process gets its pid
    torchrun_job(tmp_path)
    procfs = ProcFS(tmp_path)
    job = find_job(10, procfs)
    write_proc(tmp_path, 12, 1, STRANGER, start_ticks=9000)
    # WHEN the job is sampled
    snapshot, _ = capture(job, Probes(procfs=procfs, pyspy=Engine(tmp_path)))
    # THEN pid 12 is the rank gone, with why; neither its /proc nor the stranger's stack is read as the rank's
    gone = snapshot.sample_of(12)
    assert not gone.alive and gone.proc is None and gone.stack is None
    assert any("its pid belongs to a newer process" in e for e in gone.errors)
    # AND rank 0 is read as before
    assert snapshot.sample_of(11).alive and snapshot.sample_of(11).stack.main.frames == TRAINING


def test_a_pid_taken_while_its_stack_was_read_drops_the_strangers_stack(tmp_path):
    # GIVEN a job whose rank 1 exits, and its pid is taken, while hangdoc reads its stack
    torchrun_job(tmp_path)
    procfs = ProcFS(tmp_path)
    job = find_job(10, procfs)

    def reused(pid: int) -> None:
        if pid == 12:
            write_proc(tmp_path, 12, 1, STRANGER, start_ticks=9000)

    # WHEN the job is sampled (its /proc read before or after: the order of the two is not fixed)
    snapshot, _ = capture(job, Probes(procfs=procfs, pyspy=Engine(tmp_path, during=reused)))
    # THEN the stack read is not kept as rank 1's, and rank 1 is gone
    assert snapshot.sample_of(12).stack is None and not snapshot.sample_of(12).alive
    assert snapshot.sample_of(11).stack is not None


def test_a_reused_pids_output_file_is_not_read_as_the_jobs_log(tmp_path):
    # GIVEN a job found with its ranks writing to rank.log; rank 1's pid then taken by a process writing elsewhere
    torchrun_job(tmp_path)
    job = find_job(10, ProcFS(tmp_path))
    logs = {pid: tmp_path / f"{name}.log" for pid, name in ((11, "rank0"), (12, "stranger"))}
    for pid, log in logs.items():
        log.write_text("step 1\n")
        os.symlink(log, tmp_path / str(pid) / "fd" / "1")
    write_proc(tmp_path, 12, 1, STRANGER, start_ticks=9000)
    # WHEN the job's output files are looked for
    sources = log_sources(job, tmp_path)
    # THEN rank 0's is one, the stranger's is not
    assert str(logs[11]) in sources and str(logs[12]) not in sources


class _Pidfds:
    """pidfd_open over pipes: a test makes a process's pidfd readable (it exited) by writing to its pipe."""

    def __init__(self):
        self.pipes: dict[int, tuple[int, int]] = {}

    def open(self, pid: int) -> int:
        r, w = os.pipe()
        self.pipes[pid] = (r, w)
        return r

    def exit(self, pid: int) -> None:
        os.write(self.pipes[pid][1], b"x")


def test_a_rank_that_exits_and_whose_pid_is_reused_ends_with_its_exit_not_as_the_stranger(tmp_path):
    # GIVEN a watch of the job, its exits read through pidfds the moment a process dies
    torchrun_job(tmp_path)
    procfs = ProcFS(tmp_path)
    pidfds = _Pidfds()
    now = iter(range(BOOT + 100, BOOT + 200, 2))     # a round every 2 s
    clock = lambda: float(next(now))                 # noqa: E731
    exits = ExitWatcher(proc_root=str(tmp_path), cgroup_root=str(tmp_path / "cg"), pidfd_open=pidfds.open,
                        poller=select.poll, background=False, clock=clock)
    watcher = Watcher(10, Probes(procfs=procfs, pyspy=Engine(tmp_path), clock=clock),
                      WatchOptions(interval_s=0.5, hang_after_s=4.0, gpu=False), exit_watcher=exits)
    watcher.start()
    # WHEN rank 1 calls os._exit(0): a zombie, read at once; then reaped, and a stranger takes pid 12
    write_proc(tmp_path, 12, 10, TRAIN, state="Z", exit_status=0)
    pidfds.exit(12)
    assert [(e.pid, e.code, e.source) for e in exits.wait(1.0)] == [(12, 0, "zombie")]
    write_proc(tmp_path, 12, 1, STRANGER, start_ticks=9000)
    for _ in range(5):
        watcher.step()
    bundle = watcher.bundle()
    exits.close()
    # THEN every later sample has rank 1 gone, none the stranger's stack, and the exit 0 stands
    assert all(not s.sample_of(12).alive and s.sample_of(12).stack is None for s in bundle.samples[1:])
    assert [(e.pid, e.code) for e in bundle.exits] == [(12, 0)]
    out = io.StringIO()
    render_text(judge(bundle).report, out, width=200, terminal=False)
    text = out.getvalue()
    assert "<string>" not in text and "rank 1 (pid 12): exited with code 0" in text, text
