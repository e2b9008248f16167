"""Which of a rank's multiprocessing children are DataLoader workers, told from their stacks, and
when that cannot be told yet: a child still starting stays a worker to be read again (issue 37, item 4)."""
from __future__ import annotations

import dataclasses

from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.snapshot import Probes, capture, refine_job
from hangdoc.collect.stacks import Dump
from hangdoc.model import Role, Stack, Thread
from tests.factories import WORKER_IDLE, _frames, node_bundle

T0 = 1_700_000_000.0
_LIB = "/usr/lib/python3.11/"
_SITE = "/opt/venv/lib/python3.11/site-packages/"
_PARENT = (("_MultiProcessingDataLoaderIter.__init__", _SITE + "torch/utils/data/dataloader.py", 1042),
           ("DataLoader._get_iterator", _SITE + "torch/utils/data/dataloader.py", 424),
           ("DataLoader.__iter__", _SITE + "torch/utils/data/dataloader.py", 479),
           ("main", "/work/train.py", 251), ("<module>", "/work/train.py", 262))
# A forked worker before it calls its target: its rank's frames, copied, down to Popen._launch.
FORKED_NOT_RUNNING = _frames(
    ("Popen._launch", _LIB + "multiprocessing/popen_fork.py", 66),
    ("Popen.__init__", _LIB + "multiprocessing/popen_fork.py", 19),
    ("Process._Popen", _LIB + "multiprocessing/context.py", 282),
    ("BaseProcess.start", _LIB + "multiprocessing/process.py", 121), *_PARENT)
# A spawned worker still importing the job's modules before it runs.
SPAWNED_IMPORTING = _frames(
    ("_find_and_load", "<frozen importlib._bootstrap>", 1176),
    ("<module>", "/work/train.py", 3),
    ("_run_code", _LIB + "runpy.py", 88),
    ("run_path", _LIB + "runpy.py", 291),
    ("_fixup_main_from_path", _LIB + "multiprocessing/spawn.py", 287),
    ("prepare", _LIB + "multiprocessing/spawn.py", 236),
    ("_main", _LIB + "multiprocessing/spawn.py", 131),
    ("spawn_main", _LIB + "multiprocessing/spawn.py", 122), ("<module>", "<string>", 1))
# A multiprocessing child of the job's own running its target: not a DataLoader worker.
OWN_PROCESS = _frames(
    ("upload_checkpoint", "/work/train.py", 77),
    ("BaseProcess.run", _LIB + "multiprocessing/process.py", 108),
    ("BaseProcess._bootstrap", _LIB + "multiprocessing/process.py", 314),
    ("Popen._launch", _LIB + "multiprocessing/popen_fork.py", 71),
    ("Popen.__init__", _LIB + "multiprocessing/popen_fork.py", 19),
    ("BaseProcess.start", _LIB + "multiprocessing/process.py", 121), *_PARENT)


def _job_with_unread_workers():
    """A one-rank job whose 2 workers were found by /proc only: role WORKER, index unknown."""
    job = node_bundle(0, 1, 0, T0, samples=1, workers=2, ranks_per_node=1).job
    procs = tuple(dataclasses.replace(p, worker_index=None, num_workers=None) if p.role is Role.WORKER else p
                  for p in job.processes)
    job = dataclasses.replace(job, processes=procs)
    return job, [p.pid for p in job.processes if p.role is Role.WORKER]


def _dump(frames, worker_id=None) -> Dump:
    return Dump(Stack((Thread(1, "MainThread", False, False, frames),)), worker_id, 2 if worker_id is not None else None)


def _roles(job):
    return {p.pid: (p.role, p.worker_index) for p in job.processes if p.role in (Role.WORKER, Role.CHILD)}


def test_a_worker_read_before_it_runs_stays_a_worker_and_is_named_once_it_runs():
    # GIVEN two workers of a rank, one read in its fork before its target runs, one spawned and importing
    job, (forked, spawned) = _job_with_unread_workers()
    # WHEN their first stacks are read
    first = refine_job(job, {forked: _dump(FORKED_NOT_RUNNING), spawned: _dump(SPAWNED_IMPORTING)})
    # THEN both stay workers of unknown index (read again next round), not other children for good
    assert _roles(first) == {forked: (Role.WORKER, None), spawned: (Role.WORKER, None)}
    # WHEN the next round reads them in their worker loop
    second = refine_job(first, {forked: _dump(WORKER_IDLE, 0), spawned: _dump(WORKER_IDLE, 1)})
    # THEN each is a DataLoader worker with its index
    assert _roles(second) == {forked: (Role.WORKER, 0), spawned: (Role.WORKER, 1)}


def test_a_child_running_something_else_is_not_a_worker():
    # GIVEN a multiprocessing child of the rank running the job's own function, and a worker in its loop
    job, (own, worker) = _job_with_unread_workers()
    # WHEN their stacks are read
    refined = refine_job(job, {own: _dump(OWN_PROCESS), worker: _dump(WORKER_IDLE, 1)})
    # THEN the child is another child, the worker a worker
    assert _roles(refined) == {own: (Role.CHILD, None), worker: (Role.WORKER, 1)}


def test_a_worker_whose_read_is_partial_stays_a_worker():
    # GIVEN two workers of a rank read by an engine that failed on part of their memory: one read holds
    # no frame at all, the other only the innermost frames (none of multiprocessing's start frames)
    job, (empty, partial) = _job_with_unread_workers()
    innermost = _frames(("_PollLikeSelector.select", _LIB + "selectors.py", 415),
                        ("wait", _LIB + "multiprocessing/connection.py", 947))
    # WHEN their stacks are read
    refined = refine_job(job, {empty: _dump(()), partial: _dump(innermost)})
    # THEN both stay workers, to be read again next round, not other children for good
    assert _roles(refined) == {empty: (Role.WORKER, None), partial: (Role.WORKER, None)}


class _FailsOnceOnWorkers:
    """A stack engine whose first read of each worker fails on part of its memory (no frame below
    the select it sleeps in), and whose next read is whole."""

    parallel = 2

    def __init__(self, workers: dict[int, int]):
        self.workers, self.reads = workers, {}

    def dump(self, pid, native=False, nonblocking=False, worker_locals=False, loop_locals=False):
        self.reads[pid] = self.reads.get(pid, 0) + 1
        if pid not in self.workers:
            return _dump(WORKER_IDLE)
        if self.reads[pid] == 1:
            return _dump(_frames(("_PollLikeSelector.select", _LIB + "selectors.py", 415)))
        return _dump(WORKER_IDLE, self.workers[pid])


def test_a_worker_read_in_part_is_read_again_in_the_same_capture(tmp_path):
    # GIVEN a rank's two workers, of unknown index, whose first read fails on part of their memory
    job, (first, second) = _job_with_unread_workers()
    engine = _FailsOnceOnWorkers({first: 0, second: 1})
    # WHEN one snapshot is captured (as `watch --once` takes it)
    snapshot, refined = capture(job, Probes(procfs=ProcFS(tmp_path), pyspy=engine))
    # THEN each worker was read once more, and the snapshot knows both by their index
    assert (engine.reads[first], engine.reads[second]) == (2, 2)
    assert _roles(refined) == {first: (Role.WORKER, 0), second: (Role.WORKER, 1)}
    assert snapshot.sample_of(first).stack.main.frames == WORKER_IDLE
    # AND a rank, or a worker read whole the first time, is read once
    assert all(n == 1 for pid, n in engine.reads.items() if pid not in (first, second))


class _StillStarting:
    """A stack engine whose reads of the workers are whole and show them still starting."""

    parallel = 2

    def __init__(self, starting: dict[int, tuple]):
        self.starting, self.reads = starting, {}

    def dump(self, pid, native=False, nonblocking=False, worker_locals=False, loop_locals=False):
        self.reads[pid] = self.reads.get(pid, 0) + 1
        return _dump(self.starting.get(pid, WORKER_IDLE))


def test_a_worker_still_starting_is_left_to_the_next_round_not_read_twice(tmp_path):
    # GIVEN a rank's two workers, of unknown index, read whole while still starting: one forked
    # (its rank's frames down to Popen._launch), one spawned (importing the job's modules)
    job, (forked, spawned) = _job_with_unread_workers()
    engine = _StillStarting({forked: FORKED_NOT_RUNNING, spawned: SPAWNED_IMPORTING})
    # WHEN one snapshot is captured, as at every epoch's start when workers are not persistent
    _, refined = capture(job, Probes(procfs=ProcFS(tmp_path), pyspy=engine))
    # THEN each is read once (a second read a few milliseconds later would find it starting still)
    assert (engine.reads[forked], engine.reads[spawned]) == (1, 1)
    # AND both stay workers, to be read next round
    assert _roles(refined) == {forked: (Role.WORKER, None), spawned: (Role.WORKER, None)}
