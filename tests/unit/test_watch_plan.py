"""Whose stacks a watch round reads: every rank, and the workers of a rank that keeps waiting on data."""
from __future__ import annotations

from collections import deque

import pytest

from hangdoc.collect.snapshot import Probes
from hangdoc.model import Role
from hangdoc.live.options import WatchOptions
from hangdoc.live.watcher import Watcher
from tests.factories import node_bundle

T0 = 1_700_000_000.0


def watcher_after(*culprits: int) -> tuple[Watcher, dict]:
    """A watcher whose samples so far had rank `c` waiting on its DataLoader, one sample per entry
    (-1: nobody waited), the others in all_reduce. Pids are alike in every sample."""
    samples = [node_bundle(0, 1, culprit, T0 + 2 * i, samples=1, workers=2, ranks_per_node=2).samples[0]
               for i, culprit in enumerate(culprits)]
    job = node_bundle(0, 1, 0, T0, samples=1, workers=2, ranks_per_node=2).job
    watcher = Watcher(job.launcher_pid, Probes(), WatchOptions(), job=job, samples=deque(samples))
    workers = {r.rank: {p.pid for p in job.processes if p.role is Role.WORKER and p.rank_pid == r.pid}
               for r in job.ranks}
    return watcher, workers


def plan(watcher: Watcher, full: bool = False) -> set[int]:
    return watcher._stack_pids(full, watcher._ranks_waiting_on_data())


def test_workers_of_a_rank_that_keeps_waiting_on_data_are_read_every_round():
    # GIVEN rank 1 caught waiting on its DataLoader in the last two samples
    watcher, workers = watcher_after(-1, 1, 1)
    # WHEN the next round is planned (not a full round)
    wanted = plan(watcher)
    # THEN every rank and rank 1's workers are read, rank 0's workers and the launcher are not
    ranks = {p.pid for p in watcher.job.ranks}
    assert wanted == ranks | workers[1]


def test_a_rank_caught_between_batches_once_does_not_cost_its_workers_stacks():
    # GIVEN rank 1 waiting on data in the last sample only (a healthy rank between two batches)
    watcher, workers = watcher_after(1, -1, 1)
    # WHEN the next round is planned
    wanted = plan(watcher)
    # THEN only the ranks are read
    assert wanted == {p.pid for p in watcher.job.ranks}


def test_a_full_round_reads_the_launcher_and_every_worker():
    # GIVEN a job with nobody waiting on data
    watcher, workers = watcher_after(-1, -1)
    # WHEN a full round is planned
    wanted = plan(watcher, full=True)
    # THEN everyone is read
    assert wanted == {p.pid for p in watcher.job.processes}


def test_a_full_round_reads_one_worker_of_a_stepping_rank_in_turn():
    # GIVEN a job whose rank 0 stepped at the last sample and whose rank 1 did not
    watcher, workers = watcher_after(-1, -1)
    rank0 = next(p.pid for p in watcher.job.ranks if p.rank == 0)
    watcher.stepping = {rank0}
    # WHEN two successive full rounds are planned
    first = plan(watcher, full=True)
    watcher.rounds += watcher.options.worker_every
    second = plan(watcher, full=True)
    # THEN each reads the launcher, every rank and every worker of rank 1, and one worker of rank 0,
    # another one the next time
    everyone_else = {p.pid for p in watcher.job.processes} - workers[0]
    for wanted in (first, second):
        assert everyone_else <= wanted and len(wanted & workers[0]) == 1, (wanted, workers)
    assert first & workers[0] != second & workers[0]


class _Pids:
    """A /proc whose process list, and each process's parent, the test sets."""

    def __init__(self, pids, parents=None):
        self.now = set(pids)
        self.parents = dict(parents or {})
        self.stats = 0

    def pids(self):
        return list(self.now)

    def stat(self, pid):
        from types import SimpleNamespace

        from hangdoc.collect.procfs import ProcGone

        if pid not in self.now:
            raise ProcGone(pid)
        self.stats += 1
        return SimpleNamespace(ppid=self.parents.get(pid, 1))


def rediscovering(monkeypatch):
    """A watch whose last discovery saw the node's processes 1, 2 and 3, and the discoveries it runs."""
    from hangdoc.live import watcher as module

    found = []
    watcher, _ = watcher_after(-1)
    monkeypatch.setattr(module, "find_job", lambda *a, **k: found.append(1) or watcher.job)
    watcher.probes = Probes(procfs=_Pids({1, 2, 3}))
    watcher.discovered = {1, 2, 3}
    return watcher, found


def test_the_job_is_discovered_again_when_a_process_starts_and_at_least_every_few_rounds(monkeypatch):
    # GIVEN a watch whose last discovery saw the node's processes 1, 2 and 3
    from hangdoc.live import watcher as module

    watcher, found = rediscovering(monkeypatch)
    # WHEN rounds pass with the same processes, one exiting meanwhile
    watcher.probes.procfs.now = {1, 2}
    for _ in range(module.REDISCOVER_EVERY - 1):
        watcher._rediscover()
    # THEN nothing is discovered until the REDISCOVER_EVERY-th round, which is
    assert found == []
    watcher._rediscover()
    assert len(found) == 1
    # AND a process that starts under one of the job's is looked for at the next round
    watcher.probes.procfs.now = {1, 2, 4}
    watcher.probes.procfs.parents[4] = watcher.job.ranks[0].pid
    watcher._rediscover()
    assert len(found) == 2


def test_processes_started_outside_the_job_do_not_bring_a_discovery_and_their_children_in_it_do(monkeypatch):
    # GIVEN a watch that discovered the node's processes 1, 2 and 3 at its last round
    watcher, found = rediscovering(monkeypatch)
    # WHEN another job on the node starts processes 7 and 8 (8 under 7), round after round
    procfs = watcher.probes.procfs
    procfs.now |= {7, 8}
    procfs.parents.update({7: 1, 8: 7})
    watcher._rediscover()
    watcher._rediscover()
    # THEN no discovery runs, and their parents are read once
    assert found == [] and procfs.stats == 2
    # WHEN a process 9 starts under a fresh process 10 whose parent is a rank of the job
    procfs.now |= {9, 10}
    procfs.parents.update({10: watcher.job.ranks[0].pid, 9: 10})
    watcher._rediscover()
    # THEN the job is discovered again at once
    assert found == [1]


def test_a_spinning_rank_is_probed_again_while_no_wait_is_found_at_its_line_and_no_more_once_one_is():
    # GIVEN a watch of two ranks: rank 0 burns a core at one line of its own (main:50) with nothing
    # moving, rank 1 waits on its DataLoader
    import dataclasses as dc

    from hangdoc.analyze.classify import WORK_WAIT
    from hangdoc.collect.stacks import PySpy
    from hangdoc.live.sampling import DWELL_PROBES, SPIN_PROBES
    from tests.unit.test_progress import TRAIN, pyframe
    from tests.unit.test_witnesses import in_dataloader, job_bundle, module

    def spin_line(i: int, native: tuple = ()) -> list[dict]:
        return [*native, pyframe("main", TRAIN, 50, {"pending": (0x13, "[...]")}), module(68)]

    rows = [[{"frames": spin_line(i), "cpu": 1.0 + 2 * i}, {"frames": in_dataloader(28), "cpu": 1.0}] for i in range(3)]
    bundle = job_bundle(rows)
    watcher = Watcher(bundle.job.launcher_pid, Probes(pyspy=PySpy("py-spy")), WatchOptions(), job=bundle.job,
                      samples=deque(bundle.samples))
    spinner = bundle.job.ranks[0].pid

    def round_with(probe_frames: list[dict] | None) -> set[int]:
        """One more sample (`probe_frames`: rank 0 read natively with these frames), judged; the
        next round's probes."""
        i = len(watcher.samples)
        more = job_bundle([[{"frames": probe_frames or spin_line(i), "cpu": 1.0 + 2 * i, "probe": bool(probe_frames)},
                            {"frames": in_dataloader(28), "cpu": 1.0}]])
        last = dc.replace(more.samples[0], time=watcher.samples[-1].time + 2.0)
        watcher.samples.append(last)
        watcher.judge_round(dc.replace(bundle, samples=tuple(watcher.samples)))
        return watcher._spinning()

    watcher.judge_round(dc.replace(bundle, samples=tuple(watcher.samples)))
    # WHEN it is probed and the probe catches the Python side of the spin (no native wait under it)
    assert watcher._spinning() == {spinner}
    probes = [round_with(spin_line(0)) for _ in range(SPIN_PROBES + DWELL_PROBES)]
    # THEN it is probed again: SPIN_PROBES times as a spin, DWELL_PROBES more as a line it dwells at, then left
    assert probes == [{spinner}] * (SPIN_PROBES + DWELL_PROBES - 1) + [set()], probes
    # AND a probe that finds the wait (c10d's Work under the line) ends the probing of that line
    watcher.spin_probes.clear()
    assert round_with(None) == {spinner}
    native = [pyframe("c10d::Work::isCompleted", "libtorch_cpu.so", 0, {})]
    waited = round_with(spin_line(0, tuple(native)))
    assert watcher.live.waits_at(spinner, watcher.judgement.lines[spinner].last.sig) or \
        watcher.judgement.lines[spinner].last.reading.detail == WORK_WAIT, watcher.judgement.lines[spinner].last.reading
    assert waited == set() and round_with(None) == set()


def stuck_workers(watcher: Watcher, rank: int, light_at: int | None = None) -> int:
    """Make rank `rank`'s workers asleep in a futex with no CPU used at every sample (sample
    `light_at`: a cheap read of worker 0, no kernel wait in it); worker 0's pid."""
    import dataclasses as dc

    pids = sorted(p.pid for p in watcher.job.processes if p.role is Role.WORKER and p.rank == rank)
    for i, snap in enumerate(watcher.samples):
        procs = []
        for s in snap.processes:
            if s.pid in pids:
                stat = dc.replace(s.proc, utime_s=50.0, stime_s=5.0, wchan="futex_wait_queue", syscall="202")
                if i == light_at and s.pid == pids[0]:
                    stat = dc.replace(stat, full=False, wchan=None, syscall=None)
                s = dc.replace(s, proc=stat)
            procs.append(s)
        watcher.samples[i] = dc.replace(snap, processes=tuple(procs))
    return pids[0]


def test_a_blocked_worker_read_cheaply_between_two_futex_reads_is_still_probed_once():
    # GIVEN rank 1 waiting on its DataLoader for three samples, its workers asleep in a futex with
    # no CPU used; worker 0 read cheaply at the middle sample (no kernel wait in a light read)
    from hangdoc.collect.stacks import PySpy

    watcher, workers = watcher_after(1, 1, 1)
    watcher.probes = Probes(pyspy=PySpy("py-spy"))
    worker = stuck_workers(watcher, 1, light_at=1)
    # WHEN the next round is planned
    assert watcher.probes_due()
    planned = watcher.plan(False)
    # THEN worker 0 is read natively (paused), its stack with it, and not again at that stack
    assert worker in planned.native and worker in planned.stacks and worker not in planned.nonblocking
    assert worker not in watcher.plan(False).native


def test_a_hang_named_before_a_blocked_workers_probe_waits_one_round_for_it_once():
    # GIVEN a watch whose culprit (rank 1) waits on its DataLoader and whose workers are blocked in a
    # futex, judged as a hang at this round, the workers not yet probed natively
    import dataclasses as dc

    from hangdoc.collect.stacks import PySpy
    from hangdoc.model import StopReason

    watcher, workers = watcher_after(1, 1, 1)
    watcher.probes = Probes(pyspy=PySpy("py-spy"))
    watcher.options = WatchOptions(hang_after_s=2.0)
    stuck_workers(watcher, 1)
    bundle = node_bundle(0, 1, 1, T0, samples=1, workers=2, ranks_per_node=2)
    bundle = dc.replace(bundle, samples=tuple(watcher.samples))
    # WHEN the round is judged
    _, judgement = watcher.judge_round(bundle)
    # THEN the hang is named but the watch holds it one round, for the probe the next round makes
    assert judgement.stop is StopReason.HANG
    assert watcher.probe_due and watcher.plan(False).native
    # AND only once a watch: the next round's hang ends it whatever is still due
    watcher.probed.clear()
    watcher.judge_round(bundle)
    assert not watcher.probe_due


@pytest.mark.parametrize("wchan, syscall", [("locks_lock_inode_wait", "73"), ("anon_pipe_read", "0")])
def test_a_worker_last_seen_asleep_on_a_file_lock_or_a_pipe_read_keeps_its_full_proc_read(wchan, syscall):
    # GIVEN rank 0 in all_reduce (not waiting on data), its worker 0 asleep on a file lock (or reading a
    # pipe) at its last full read, worker 1 asleep in a futex
    import dataclasses as dc

    watcher, workers = watcher_after(-1, -1)
    asleep, idle = sorted(workers[0])
    last = watcher.samples[-1]
    procs = tuple(dc.replace(s, proc=dc.replace(s.proc, wchan=wchan, syscall=syscall))
                  if s.pid == asleep else s for s in last.processes)
    watcher.samples[-1] = dc.replace(last, processes=procs)
    # WHEN the next (not full) round is planned
    planned = watcher.plan(False)
    # THEN worker 0 gets the full /proc read (kernel wait, /proc/locks or the pipe's writers), worker 1 the cheap one
    assert asleep not in planned.light and idle in planned.light


def test_a_rank_caught_waiting_on_data_once_has_its_workers_proc_read_in_full_but_no_stacks():
    # GIVEN rank 1 waiting on data at the last sample only
    watcher, workers = watcher_after(-1, -1, 1)
    # WHEN the next (not full) round is planned
    planned = watcher.plan(False)
    # THEN its workers get the full /proc read (half a millisecond each), not their stacks; rank 0's the cheap one
    assert not workers[1] & planned.light and not workers[1] & planned.stacks
    assert workers[0] <= planned.light


def test_a_worker_holding_a_file_lock_a_rank_waits_for_gets_the_full_proc_read():
    # GIVEN rank 0 asleep on a file lock /proc/locks says worker 0 of rank 0 holds
    import dataclasses as dc

    from hangdoc.model import FileLock

    watcher, workers = watcher_after(-1, -1)
    holder, idle = sorted(workers[0])
    rank0 = next(p.pid for p in watcher.job.ranks if p.rank == 0)
    lock = FileLock("FLOCK", "WRITE", "fe:00:11", "/data/cache.lock", holder)
    last = watcher.samples[-1]
    procs = tuple(dc.replace(s, proc=dc.replace(s.proc, wchan="locks_lock_inode_wait", syscall="73", locks=(lock,)))
                  if s.pid == rank0 else s for s in last.processes)
    watcher.samples[-1] = dc.replace(last, processes=procs)
    # WHEN the next (not full) round is planned
    planned = watcher.plan(False)
    # THEN the holder gets the full read (is it asleep on a lock the rank holds?), its sibling the cheap one
    assert holder not in planned.light and idle in planned.light


def test_in_an_overdue_quiet_a_rank_caught_waiting_on_data_has_its_workers_read_in_the_same_round():
    # GIVEN a watch in a quiet past most of the job's longest step, whose round just caught rank 1
    # waiting on its DataLoader for the first time (its workers planned for the light read only)
    watcher, workers = watcher_after(-1, -1)
    watcher.overdue = True
    round_plan = watcher.plan(all_workers=False)
    caught = node_bundle(0, 1, 1, T0 + 4, samples=1, workers=2, ranks_per_node=2).samples[0]
    # WHEN the watch asks which workers to read again, closely, within the round
    late, stacks = watcher.late_workers(caught, round_plan)
    # THEN rank 1's workers, with their stacks: not rank 0's
    assert late == workers[1] == stacks
    # AND out of such a quiet, their full /proc read only (the kernel's wait); with rank 1 computing, none
    watcher.overdue = False
    assert watcher.late_workers(caught, round_plan) == (workers[1], set())
    watcher.overdue = True
    quiet = node_bundle(0, 1, -1, T0 + 4, samples=1, workers=2, ranks_per_node=2).samples[0]
    assert watcher.late_workers(quiet, round_plan) == (set(), set())


def test_a_rank_caught_waiting_on_data_a_second_time_has_its_workers_read_in_that_round():
    # GIVEN a watch (no quiet yet) whose last round caught rank 1 waiting on its DataLoader, and whose
    # round now catches it again: the next round would read its workers' stacks
    watcher, workers = watcher_after(-1, 1)
    round_plan = watcher.plan(all_workers=False)
    again = node_bundle(0, 1, 1, T0 + 4, samples=1, workers=2, ranks_per_node=2).samples[0]
    # WHEN the watch asks which workers to read closely within the round
    late, stacks = watcher.late_workers(again, round_plan)
    # THEN rank 1's workers, with their stacks, now: a round sooner
    assert late == workers[1] == stacks
    # AND a rank that waited at the last round but steps now costs nothing
    stepping = node_bundle(0, 1, -1, T0 + 4, samples=1, workers=2, ranks_per_node=2).samples[0]
    assert watcher.late_workers(stepping, round_plan) == (set(), set())


def test_a_worker_read_closely_asleep_where_a_proof_begins_has_its_stack_read_and_the_next_round_at_a_proofs_span():
    # GIVEN a round that caught rank 1 waiting on its data for the first time, its workers read
    # again in full: worker 0 asleep in a futex, worker 1 in poll (waiting for its next index)
    import dataclasses as dc

    watcher, workers = watcher_after(-1, -1)
    caught = node_bundle(0, 1, 1, T0 + 4, samples=1, workers=2, ranks_per_node=2).samples[0]
    late, _ = watcher.late_workers(caught, watcher.plan(all_workers=False))
    asleep, polling = sorted(late)

    def reading(wchan, syscall, state="S"):
        return tuple(dc.replace(s, proc=dc.replace(s.proc, state=state, wchan=wchan, syscall=syscall))
                     if s.pid == asleep else
                     dc.replace(s, proc=dc.replace(s.proc, wchan="do_sys_poll", syscall="7")) if s.pid == polling
                     else s for s in caught.processes)

    # WHEN the watch asks whether a proof may begin there
    # THEN a futex, a file lock, an empty pipe and a stop may; a poll, or the same worker read lightly, may not
    for wchan, syscall, state in (("futex_wait_queue", "202", "S"), ("locks_lock_inode_wait", "73", "S"),
                                  ("pipe_read", "0", "S"), ("do_signal_stop", "0", "T")):
        assert watcher.may_prove(dc.replace(caught, processes=reading(wchan, syscall, state)), late) == {asleep}, wchan
    assert not watcher.may_prove(dc.replace(caught, processes=reading("do_sys_poll", "7")), late)
    light = tuple(dc.replace(s, proc=dc.replace(s.proc, full=False)) for s in reading("futex_wait_queue", "202"))
    assert not watcher.may_prove(dc.replace(caught, processes=light), late)



def test_a_worker_read_lightly_holding_a_file_lock_a_rank_sleeps_on_is_read_in_full_within_the_round():
    # GIVEN a round that reads rank 0 asleep on a file lock /proc/locks says worker 0 of rank 1 holds,
    # that worker read lightly by the round's plan (nobody waits on data)
    import dataclasses as dc

    from hangdoc.model import FileLock

    watcher, workers = watcher_after(-1, -1)
    round_plan = watcher.plan(all_workers=False)
    holder = min(workers[1])
    assert holder in round_plan.light
    rank0 = next(p.pid for p in watcher.job.ranks if p.rank == 0)
    lock = FileLock("FLOCK", "WRITE", "fe:00:11", "/data/dl.lock", holder)
    now = node_bundle(0, 1, -1, T0 + 4, samples=1, workers=2, ranks_per_node=2).samples[0]
    now = dc.replace(now, processes=tuple(
        dc.replace(s, proc=dc.replace(s.proc, wchan="locks_lock_inode_wait", syscall="73", locks=(lock,)))
        if s.pid == rank0 else s for s in now.processes))
    # WHEN the watch asks which processes to read again, closely, within the round
    late, stacks = watcher.late_workers(now, round_plan)
    # THEN the holder, in full, no stack yet (is it asleep on a lock rank 0 holds? a wait-for cycle)
    assert late == {holder} and stacks == set()
