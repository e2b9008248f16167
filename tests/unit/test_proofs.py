"""A proven hang is named at the second sample that agrees on its proof, not at the threshold; a job
that still moves proves nothing. Each proof over a recorded golden bundle (or a built one), with its
look-alike; the wait-for cycle on file locks also over two real processes that deadlock."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from hangdoc.analyze.diagnose import JobFacts, decide
from hangdoc.analyze.proofs import PROOF_SPAN_S
from hangdoc.bundle.files import load_bundle
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.snapshot import Probes, capture
from hangdoc.model import (
    BUNDLE_SCHEMA, Bundle, Host, Job, Options, ProcessInfo, Proof, ProofKind, RankDigest, Role, StepSummary, Thread,
    Verdict,
)
from hangdoc.render.words import proof_line
from hangdoc.report.judge import judge
from tests.factories import CACHE_LOCK, DOWNLOAD_LOCK, LOCK_RANK0, LOCK_WORKER, lock_cycle_bundle, wait_until

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
LEARNED = 60.0      # a threshold far beyond the bundles' span: only a proof names the hang inside it


def golden(case: str):
    return load_bundle(GOLDEN / case / "bundle.json")


def first_hang(bundle, hang_after: float = LEARNED):
    """The first sample at which the verdict is hang, judging the bundle round by round as a watch
    does; (its index, the diagnosis), or (None, None)."""
    for n in range(2, len(bundle.samples) + 1):
        part = dataclasses.replace(bundle, samples=bundle.samples[:n])
        diagnosis = judge(part, hang_after=hang_after, lanes=False).diagnosis
        if diagnosis.verdict == Verdict.HANG:
            return n - 1, diagnosis
    return None, None


def edit(bundle, pid: int, change, first: int = 0, last: int | None = None):
    """The bundle with `change(sample, i)` applied to `pid`'s sample at rounds first..last."""
    samples = list(bundle.samples)
    for i in range(first, len(samples) if last is None else last + 1):
        snap = samples[i]
        procs = tuple(change(s, i) if s.pid == pid else s for s in snap.processes)
        samples[i] = dataclasses.replace(snap, processes=procs)
    return dataclasses.replace(bundle, samples=tuple(samples))


def with_proc(sample, **fields):
    return dataclasses.replace(sample, proc=dataclasses.replace(sample.proc, **fields))


def rank_pid(bundle, rank: int) -> int:
    return next(p.pid for p in bundle.job.ranks if p.rank == rank)


def worker_pid(bundle, rank: int, index: int) -> int:
    owner = rank_pid(bundle, rank)
    return next(w.pid for w in bundle.job.children_of(owner) if w.worker_index == index)


def assert_named_at_second_agreeing_sample(bundle, at: int, diagnosis, kind: ProofKind, culprit: int):
    times = [s.time for s in bundle.samples]
    assert diagnosis.proof is not None and diagnosis.proof.kind == kind
    assert diagnosis.culprits == (culprit,)
    # the first sample PROOF_SPAN_S after the first that showed it: the one before was too close
    assert times[at] - diagnosis.proof.since >= PROOF_SPAN_S > times[at - 1] - diagnosis.proof.since
    # long before the threshold
    assert times[at] - times[0] < LEARNED


# --- must fire ----------------------------------------------------------------------------------


@pytest.mark.parametrize("case, kind, culprit, words, rule", [
    ("worker-deadlock", ProofKind.FORK_LOCK, 1,
     "rank 1's DataLoader worker 0 (pid 27097), forked, waits on a lock at report_stats", "worker-deadlock"),
    ("pdb-breakpoint", ProofKind.PDB_PROMPT, 0, "rank 0 (pid 16983) sits at a pdb prompt reading its stdin",
     "debugger-prompt"),
    ("prefetch-thread-died", ProofKind.DEAD_PRODUCER, 1, "for its thread 'prefetch' (0x4600), which is gone",
     "helper-thread-died"),
])
def test_a_proven_hang_is_named_at_the_second_agreeing_sample(case, kind, culprit, words, rule):
    # GIVEN a recorded hang whose cause shows itself, judged round by round with a 60 s threshold
    bundle = golden(case)
    # WHEN the watch judges each round
    at, diagnosis = first_hang(bundle)
    # THEN the hang is named at the second sample agreeing on the proof, seconds into the bundle
    assert at is not None, f"{case}: no hang named within the threshold"
    assert_named_at_second_agreeing_sample(bundle, at, diagnosis, kind, culprit)
    # and the report states the proof
    report = judge(dataclasses.replace(bundle, samples=bundle.samples[:at + 1]), hang_after=LEARNED).report
    assert words in proof_line(report)
    assert "whatever the 60 s threshold" in proof_line(report)
    # and the rule that names the cause fires at that sample, as at the threshold
    assert rule in [f.rule for f in report.findings]


def test_a_forked_workers_lock_names_the_ranks_threads_that_could_hold_it():
    # GIVEN rank 1's worker asleep on the lock its rank's stats thread held at fork
    _, diagnosis = first_hang(golden("worker-deadlock"))
    # THEN the proof says no thread of the worker holds it, and names the rank's own thread by id
    assert "a thread that does not exist in this process" in diagnosis.proof.said
    assert "'stats-uploader' (0x69d8)" in diagnosis.proof.said


def test_a_worker_parked_on_the_lock_is_not_read_again_and_still_agrees():
    # GIVEN worker-deadlock as a watch samples it: once a worker's main thread has not run since
    # its last stack, the watch reads only its /proc (the stack stays where it was)
    bundle = golden("worker-deadlock")
    for index in (0, 1):
        pid = worker_pid(bundle, 1, index)
        bundle = edit(bundle, pid, lambda s, i: dataclasses.replace(s, stack=None), first=1)
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN the futex and the flat CPU agree with the one stack read: named at the second agreeing sample
    assert at is not None
    assert_named_at_second_agreeing_sample(bundle, at, diagnosis, ProofKind.FORK_LOCK, 1)
    assert "waits on a lock at report_stats" in diagnosis.proof.said


def test_a_worker_read_in_full_asleep_in_the_futex_before_its_first_stack_agrees_from_that_read():
    # GIVEN worker-deadlock as a watch that caught rank 1 waiting on its data once reads it: the
    # workers' full /proc first (asleep in the futex), their stacks only from round 2 on
    bundle = golden("worker-deadlock")
    for index in (0, 1):
        bundle = edit(bundle, worker_pid(bundle, 1, index), lambda s, i: dataclasses.replace(s, stack=None), last=1)
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN the proof counts from the first full reading (the CPU flat since: the worker ran no code
    # between) and the hang is named at the second agreeing sample, the stacks at round 2 showing the lock
    assert at is not None
    assert diagnosis.proof.since == bundle.samples[0].time
    assert_named_at_second_agreeing_sample(bundle, at, diagnosis, ProofKind.FORK_LOCK, 1)


def test_a_worker_asleep_in_a_futex_with_no_stack_showing_the_lock_proves_no_fork_lock():
    # GIVEN the same workers with no stack read at all: only the kernel's futex and the flat CPU
    bundle = golden("worker-deadlock")
    for index in (0, 1):
        bundle = edit(bundle, worker_pid(bundle, 1, index), lambda s, i: dataclasses.replace(s, stack=None))
    # WHEN judged round by round
    _, diagnosis = first_hang(bundle)
    # THEN no fork-lock is proven: a futex alone does not say whose lock, nor that it is the job's
    assert diagnosis is None or diagnosis.proof is None or diagnosis.proof.kind != ProofKind.FORK_LOCK


def stopped_straggler():
    """compute-straggler with rank 1 stopped (state T, CPU flat) from round 2 on."""
    bundle = golden("compute-straggler")
    pid = rank_pid(bundle, 1)
    cpu = bundle.samples[2].sample_of(pid).proc.utime_s
    return edit(bundle, pid, lambda s, i: with_proc(s, state="T", utime_s=cpu), first=2), pid


def test_a_stopped_rank_is_named_at_the_second_agreeing_sample():
    # GIVEN rank 0 in all_reduce and rank 1 stopped by SIGSTOP from round 2 on
    bundle, _ = stopped_straggler()
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN it is a hang as soon as two samples PROOF_SPAN_S apart agree, rank 1 the culprit
    assert at is not None
    assert_named_at_second_agreeing_sample(bundle, at, diagnosis, ProofKind.STOPPED, 1)
    assert diagnosis.proof.since == bundle.samples[2].time
    assert "rank 1 (pid" in diagnosis.proof.said and "is stopped (state T" in diagnosis.proof.said


def test_a_wait_for_cycle_on_file_locks_is_named_at_the_second_agreeing_sample():
    # GIVEN rank 0 asleep on cache.lock held by rank 1's worker 2, asleep on dl.lock held by rank 0
    bundle = lock_cycle_bundle()
    # WHEN the watch judges each round
    at, diagnosis = first_hang(bundle)
    # THEN the hang is named at the second sample showing the cycle, both ranks the culprits
    times = [s.time for s in bundle.samples]
    assert at is not None and diagnosis.proof.kind == ProofKind.LOCK_CYCLE
    assert diagnosis.proof.since == times[2] and at == 3 and times[at] - times[2] >= PROOF_SPAN_S
    assert diagnosis.culprits == (0, 1)
    # and the report states the cycle: both processes, both files, who holds which
    report = judge(dataclasses.replace(bundle, samples=bundle.samples[:at + 1]), hang_after=LEARNED).report
    assert (f"rank 0 (pid {LOCK_RANK0}) at fetch_shard (data.py:31) waits for {CACHE_LOCK} held by rank 1's "
            f"DataLoader worker 2 (pid {LOCK_WORKER}) at CachedShards.__getitem__ (data.py:52), which waits for "
            f"{DOWNLOAD_LOCK} held by rank 0: a wait-for cycle on file locks") in proof_line(report)
    # and file-lock-wait names each wait, its fix the lock order, not a holder to wait out
    waits = [f for f in report.findings if f.rule == "file-lock-wait"]
    assert len(waits) == 2 and all("take the lock files in one order everywhere" in f.fix for f in waits)


def test_a_cycle_through_a_renumbered_merge_still_closes():
    # GIVEN the cycle's bundle as a merge numbers it: every pid of the node moved up by PID_STRIDE
    from hangdoc.analyze.proofs import proof_of
    from hangdoc.analyze.classify import classify_rank
    from hangdoc.model import PID_STRIDE

    def moved(pid: int) -> int:
        return pid + PID_STRIDE

    bundle = lock_cycle_bundle(samples=4)
    job = dataclasses.replace(bundle.job, processes=tuple(
        dataclasses.replace(p, pid=moved(p.pid), ppid=moved(p.ppid), rank_pid=p.rank_pid and moved(p.rank_pid))
        for p in bundle.job.processes))
    samples = tuple(dataclasses.replace(s, processes=tuple(dataclasses.replace(p, pid=moved(p.pid)) for p in s.processes))
                    for s in bundle.samples)
    bundle = dataclasses.replace(bundle, job=job, samples=samples)
    rank = bundle.job.info(moved(LOCK_RANK0))
    # WHEN rank 0's proof is looked for (/proc/locks still names the holders by their pids on the node)
    proof = proof_of(bundle, rank, classify_rank(bundle.last.sample_of(rank.pid)))
    # THEN the cycle closes, said in the node's pids
    assert proof is not None and proof.kind == ProofKind.LOCK_CYCLE and proof.pid == LOCK_RANK0
    assert f"worker 2 (pid {LOCK_WORKER})" in proof.said


# --- must not fire: the look-alikes, on a job that still moves -----------------------------------


def test_a_rank_stopped_briefly_then_continued_proves_nothing():
    # GIVEN rank 1 stopped for under PROOF_SPAN_S (two rounds), then computing again
    bundle = golden("compute-straggler")
    pid = rank_pid(bundle, 1)
    times = [s.time for s in bundle.samples]
    assert times[3] - times[2] < PROOF_SPAN_S
    cpu = bundle.samples[2].sample_of(pid).proc.utime_s
    brief = edit(bundle, pid, lambda s, i: with_proc(s, state="T", utime_s=cpu), first=2, last=3)
    # WHEN judged round by round
    at, _ = first_hang(brief)
    # THEN no round names a hang: the straggler computes, as the unedited bundle does
    assert at is None
    assert first_hang(bundle)[0] is None


def test_a_stopped_rank_while_the_job_still_steps_proves_nothing():
    # GIVEN a rank that shows state T while a rank stepped after it (the job still moves)
    now = 1_700_000_020.0
    stopped = Proof(ProofKind.STOPPED.value, since=now - 3, at=now, said="rank 1 is stopped")
    ranks = [digest(0, "collective-wait", "all_reduce", last_step=now - 1),
             digest(1, "idle", "stopped (SIGSTOP)", last_step=now - 1, proof=stopped)]
    # WHEN decided
    decision = decide(ranks, JobFacts(first=now - 20, now=now, logs=(), exit_code=None, hang_after=LEARNED))
    # THEN no hang: a proof counts only where nothing stepped since it began
    assert decision.verdict != Verdict.HANG and decision.proof is None
    # and the same proof with no step since it began names the hang
    quiet = [msgspec.structs.replace(r, rhythm=StepSummary(8, 2.0, now - 4, True)) for r in ranks]
    decision = decide(quiet, JobFacts(first=now - 20, now=now, logs=(), exit_code=None, hang_after=LEARNED))
    assert decision.verdict == Verdict.HANG and decision.culprits == (1,) and decision.proof == stopped


def test_a_lock_taken_and_released_proves_nothing():
    # GIVEN worker-deadlock's worker at the same lock line, but working between samples (CPU moves):
    # it takes the lock, works, releases it, takes it again
    bundle = golden("worker-deadlock")
    for index in (0, 1):
        pid = worker_pid(bundle, 1, index)
        bundle = edit(bundle, pid, lambda s, i: with_proc(s, utime_s=s.proc.utime_s + 0.1 * i))
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN no proof names it: only the threshold could
    assert at is None, diagnosis.proof


def test_a_lock_a_working_sibling_holds_proves_nothing():
    # GIVEN worker 0 asleep at the lock line, CPU flat, while its sibling works (a multiprocessing.Lock
    # they share, held by the one that works)
    bundle = golden("worker-deadlock")
    pid = worker_pid(bundle, 1, 1)
    bundle = edit(bundle, pid, lambda s, i: with_proc(s, utime_s=s.proc.utime_s + 0.1 * i))
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN no proof: the lock's holder may be working
    assert at is None, diagnosis.proof


def test_a_pdb_prompt_that_is_answered_proves_nothing():
    # GIVEN rank 0 at the pdb prompt, someone typing at it: each command runs code between samples
    bundle = golden("pdb-breakpoint")
    pid = rank_pid(bundle, 0)
    answered = edit(bundle, pid, lambda s, i: with_proc(s, utime_s=s.proc.utime_s + 0.1 * i))
    # WHEN judged round by round
    at, diagnosis = first_hang(answered)
    # THEN no proof names it
    assert at is None, diagnosis.proof


def test_a_queue_whose_producer_is_alive_but_slow_proves_nothing():
    # GIVEN prefetch-thread-died with the prefetch thread still alive in every stack (slow, not dead)
    bundle = golden("prefetch-thread-died")
    pid = rank_pid(bundle, 1)
    producer = next(t for s in bundle.samples if (p := s.sample_of(pid)).stack is not None
                    for t in p.stack.threads if t.name == "prefetch")

    def keep(sample, i):
        if sample.stack is None or any(t.tid == producer.tid for t in sample.stack.threads):
            return sample
        threads: tuple[Thread, ...] = sample.stack.threads + (producer,)
        return dataclasses.replace(sample, stack=dataclasses.replace(sample.stack, threads=threads))

    slow = edit(bundle, pid, keep)
    # WHEN judged round by round
    at, diagnosis = first_hang(slow)
    # THEN no proof names it
    assert at is None, diagnosis.proof


def test_two_processes_taking_one_file_lock_in_turn_prove_nothing():
    # GIVEN rank 0 and rank 1's worker 2 contending for cache.lock: at each sample one sleeps on it
    # while the other holds it and works, the next sample the other way round
    bundle = lock_cycle_bundle(cycle=False)
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN no round names a hang: a wait for a lock whose holder works is no cycle
    assert at is None, diagnosis.proof


def test_a_chain_of_lock_waits_that_leaves_the_job_proves_nothing():
    # GIVEN the cycle's bundle, but the worker's dl.lock held by a process outside the job (pid 999)
    bundle = lock_cycle_bundle()

    def elsewhere(sample, i):
        locks = tuple(dataclasses.replace(lock, holder_pid=999) for lock in sample.proc.locks)
        return with_proc(sample, locks=locks)

    bundle = edit(bundle, LOCK_WORKER, elsewhere)
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN no lock-cycle proof: rank 0 waits on a chain that ends outside the job, which only the threshold judges
    assert at is None or diagnosis.proof is None or diagnosis.proof.kind != ProofKind.LOCK_CYCLE


def test_a_cycle_seen_at_one_sample_proves_nothing():
    # GIVEN the cycle shown at one sample only (the reads of the two waits straddled a release),
    # both running again at the next
    bundle = lock_cycle_bundle()
    running = lock_cycle_bundle(cycle=False)
    samples = bundle.samples[:3] + running.samples[3:]
    # WHEN judged round by round
    at, diagnosis = first_hang(dataclasses.replace(bundle, samples=samples))
    # THEN no proof
    assert at is None, diagnosis.proof


# --- a real deadlock --------------------------------------------------------------------------------

TAKE_TWO = ("import fcntl, os, sys, time\n"
            "first, second = (os.open(p, os.O_RDWR | os.O_CREAT) for p in sys.argv[1:3])\n"
            "fcntl.flock(first, fcntl.LOCK_EX)\n"
            "open(sys.argv[3], 'w').close()\n"
            "while not os.path.exists(sys.argv[4]):\n    time.sleep(0.01)\n"
            "fcntl.flock(second, fcntl.LOCK_EX)\n")


def test_two_real_processes_deadlocked_on_flock_are_proven_a_cycle(tmp_path):
    # GIVEN two processes taking cache.lock and dl.lock with flock in opposite order: each holds one
    cache, download = tmp_path / "cache.lock", tmp_path / "dl.lock"
    started: list[subprocess.Popen] = []
    try:
        for first, second, mine, theirs in ((cache, download, "held.0", "held.1"), (download, cache, "held.1", "held.0")):
            started.append(subprocess.Popen([sys.executable, "-c", TAKE_TWO, str(first), str(second),
                                             str(tmp_path / mine), str(tmp_path / theirs)]))
        procfs = ProcFS()
        if not wait_until(lambda: all(procfs.proc_stat(p.pid).in_file_lock for p in started), timeout=10.0):
            pytest.skip("this kernel does not name the lock wait: "
                        f"{[procfs.proc_stat(p.pid).wchan for p in started]}")
        # as discovery finds them: two ranks, each with its start time
        infos = tuple(ProcessInfo(p.pid, os.getpid(), Role.RANK, (sys.executable, "-c", "..."), sys.executable,
                                  procfs.stat(p.pid).start_time, {}, n, n, 0, 2, p.pid)
                      for n, p in enumerate(started))
        job = Job(None, None, None, 2, None, infos)
        # WHEN hangdoc's collect reads them twice, PROOF_SPAN_S apart, and judges what it read
        first, _ = capture(job, Probes(pyspy=None))
        time.sleep(PROOF_SPAN_S + 0.1)
        second, _ = capture(job, Probes(pyspy=None))
        bundle = Bundle(BUNDLE_SCHEMA, "0.1.0", second.time, Host("node0", "x86_64", "6.1", 2, "3.11", "2.3.0"), job,
                        (first, second), options=Options(interval_s=PROOF_SPAN_S))
        diagnosis = judge(bundle, hang_after=LEARNED, lanes=False).diagnosis
        # THEN a proven hang: the cycle, both processes and both files by name
        assert diagnosis.verdict == Verdict.HANG and diagnosis.proof is not None
        assert diagnosis.proof.kind == ProofKind.LOCK_CYCLE and diagnosis.culprits == (0, 1)
        one, other = started
        said = diagnosis.proof.said
        assert (f"waits for {download} held by rank 1 (pid {other.pid}), which waits for {cache} held by rank 0"
                in said or f"waits for {cache} held by rank 0 (pid {one.pid}), which waits for {download} held by "
                "rank 1" in said), said
        assert "a wait-for cycle on file locks" in said
    finally:
        for proc in started:
            proc.kill()
            proc.wait(5)


def digest(n: int, state: str, detail: str | None, last_step: float, proof: Proof | None = None) -> RankDigest:
    return RankDigest(rank=n, pid=100 + n, host="vm", group_rank=0, state=state, detail=detail, top_frame=None,
                      stack_key=state, state_since=last_step, blocked_since=None, exited_at=None, progress="stuck",
                      rhythm=StepSummary(8, 2.0, last_step, True), unmoved_since=None, points=10, proof=proof)
