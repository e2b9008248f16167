"""Bounds on what hangdoc keeps of a job: every output line cut to a bound (head and tail, the cut
said), a stack engine's output read up to a bound, and a rank's children DataLoader workers only
when they look like one."""
from __future__ import annotations

import io
import sys

import pytest
from test_merge_jobs import FakeProc

from hangdoc.base.limits import MAX_LINE_CHARS, cut_line
from hangdoc.collect.discover import MAX_WORKERS_PER_RANK, find_job
from hangdoc.collect.logs import read_tail
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.snapshot import Dump, refine_job
from hangdoc.collect.stacks import StackError, bounded_run
from hangdoc.live.runner import OutputTail
from hangdoc.model import Frame, Role, Stack, Thread


def tail_of(data: bytes) -> tuple[list[str], str]:
    sink = io.StringIO()
    tail = OutputTail(io.BufferedReader(io.BytesIO(data)), sink)
    tail.join()
    return list(tail.lines), sink.getvalue()


def test_a_line_past_the_bound_is_kept_as_its_head_and_tail_with_the_cut_said():
    # GIVEN output with one 3 MB line between two short ones
    long = "HEAD " + "word " * 600_000 + "TAIL"
    lines, echoed = tail_of(f"before\n{long}\nafter\n".encode())
    # THEN the output streams through whole, and the kept line is its head and tail, the cut said
    assert echoed == f"before\n{long}\nafter\n"
    assert lines[0] == "before" and lines[2] == "after"
    assert len(lines[1]) <= MAX_LINE_CHARS and lines[1].startswith("HEAD word") and lines[1].endswith("word TAIL")
    assert "characters cut ...]" in lines[1]


def test_carriage_return_only_output_is_kept_cut_not_dropped():
    # GIVEN 4 MB of progress updates separated by \r only, and no newline at the end
    lines, _ = tail_of(b"".join(b"step %07d\r" % i for i in range(400_000)))
    # THEN one line is kept, within the bound, ending with the last update
    assert len(lines) == 1 and len(lines[0]) <= MAX_LINE_CHARS and lines[0].rstrip("\r").endswith("step 0399999")


def test_a_log_files_long_line_is_cut_too(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("x" * 10 + "\n" + "y" * 60_000 + "\n")
    tail = read_tail(str(log))
    assert max(len(line) for line in tail.lines) <= MAX_LINE_CHARS and "characters cut" in tail.lines[-1]


def test_cut_line_leaves_a_short_line_alone():
    assert cut_line("a" * MAX_LINE_CHARS) == "a" * MAX_LINE_CHARS


def test_a_stack_engine_that_prints_past_the_bound_is_stopped_with_one_line():
    # GIVEN an engine that prints 8 MB for one process, read within 1 MB
    cmd = [sys.executable, "-c", "import sys; sys.stdout.write('x' * (8 << 20))"]
    # THEN the read fails with one line instead of holding it all
    with pytest.raises(StackError, match="printed more than 1 MiB"):
        bounded_run(cmd, timeout=30, limit=1 << 20)
    done = bounded_run([sys.executable, "-c", "print('[]')"], timeout=30)
    assert (done.returncode, done.stdout) == (0, "[]\n")


TRAIN = ("/usr/bin/python3", "train.py")
ENV = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def test_hundreds_of_forked_children_are_not_hundreds_of_workers(tmp_path):
    # GIVEN a rank with 200 children forked from it (its command line)
    proc = FakeProc(tmp_path)
    proc.add(100, 1, TRAIN, ENV)
    for pid in range(101, 301):
        proc.add(pid, 100, TRAIN, ENV)
    # WHEN the job is found
    job = find_job(100, ProcFS(tmp_path))
    # THEN no more than a DataLoader's share are taken for workers; the rest are its other children
    assert len(job.by_role(Role.WORKER)) == MAX_WORKERS_PER_RANK
    assert len(job.by_role(Role.CHILD)) == 200 - MAX_WORKERS_PER_RANK


def _dump(*frames: Frame) -> Dump:
    return Dump(Stack(threads=(Thread(1, "MainThread", True, True, frames),)))


def test_a_plain_fork_child_read_whole_is_no_worker(tmp_path):
    # GIVEN a rank and two forked children: one going on with the rank's code, one a DataLoader worker
    proc = FakeProc(tmp_path)
    proc.add(100, 1, TRAIN, ENV)
    proc.add(101, 100, TRAIN, ENV)
    proc.add(102, 100, TRAIN, ENV)
    job = find_job(100, ProcFS(tmp_path))
    assert {p.pid for p in job.by_role(Role.WORKER)} == {101, 102}
    plain = _dump(Frame("sleep", "train.py", "train.py", 9), Frame("<module>", "train.py", "train.py", 20))
    worker = _dump(Frame("_worker_loop", "w.py", "torch/utils/data/_utils/worker.py", 300),
                   Frame("run", "p.py", "multiprocessing/process.py", 108),
                   Frame("_bootstrap", "p.py", "multiprocessing/process.py", 314),
                   Frame("<module>", "train.py", "train.py", 20))
    # WHEN their stacks are read THEN the plain fork is another child, the worker stays one
    refined = refine_job(job, {101: plain, 102: worker})
    assert [p.pid for p in refined.by_role(Role.WORKER)] == [102] and [p.pid for p in refined.by_role(Role.CHILD)] == [101]
