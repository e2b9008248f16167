"""A proven hang is named at the second sample that agrees on its proof, not at the threshold; a job
that still moves proves nothing. Each proof over a recorded golden bundle, with its look-alike."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import pytest

from hangdoc.analyze.diagnose import JobFacts, decide
from hangdoc.analyze.proofs import PROOF_SPAN_S
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Proof, ProofKind, RankDigest, StepSummary, Thread, Verdict
from hangdoc.render.words import proof_line
from hangdoc.report.judge import judge

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


def digest(n: int, state: str, detail: str | None, last_step: float, proof: Proof | None = None) -> RankDigest:
    return RankDigest(rank=n, pid=100 + n, host="vm", group_rank=0, state=state, detail=detail, top_frame=None,
                      stack_key=state, state_since=last_step, blocked_since=None, exited_at=None, progress="stuck",
                      rhythm=StepSummary(8, 2.0, last_step, True), unmoved_since=None, points=10, proof=proof)
