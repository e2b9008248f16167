"""Attaching late: what the kernel knew of the past at the first sample, and how the verdict uses it."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import msgspec

import pytest

from hangdoc.analyze.diagnose import JobFacts, decide
from hangdoc.analyze.past import PAST_HANG_AFTER_S
from hangdoc.analyze.progress import HANG_FLOOR_S
from hangdoc.analyze.timeline import Point, still
from hangdoc.collect.procfs import ProcFS
from hangdoc.model import BeforeAttach, RankDigest, Report, StepSummary, Threshold
from hangdoc.render.words import before_line, headline, threshold_line

T0 = 1_700_000_000.0     # hangdoc's first sample


def rank(n: int, state: str, detail: str | None, *, waited: float | None = None, still: bool = True,
         progress: str = "stuck", points: int = 3, steps: int = 0, last_step: float | None = None) -> RankDigest:
    """A rank as a node's digest has it, `waited` seconds off the CPU at the first sample."""
    return RankDigest(rank=n, pid=100 + n, host="vm", group_rank=0, state=state, detail=detail, top_frame=None,
                      stack_key=state, state_since=T0, blocked_since=T0 if state == "collective-wait" else None,
                      exited_at=None, progress=progress, rhythm=StepSummary(steps, None, last_step, True),
                      unmoved_since=T0, points=points, last_ran=None if waited is None else T0 - waited,
                      first_seen=T0, still=still)


def facts(now: float, hang_after: float | None = None) -> JobFacts:
    return JobFacts(first=T0, now=now, logs=(), exit_code=None, hang_after=hang_after)


def test_a_wait_already_old_with_the_culprit_asleep_is_a_hang_after_three_samples():
    # GIVEN rank 0 off the CPU in all_reduce for 847 s when hangdoc arrived, rank 1 asleep at a prompt
    ranks = [rank(0, "collective-wait", "all_reduce", waited=847), rank(1, "idle", "a debugger prompt", waited=850)]
    # WHEN three samples over 4 s show nothing moving
    decision = decide(ranks, facts(T0 + 4))
    # THEN it is a hang of rank 1, named from the past, and the onset is the wait's start
    assert (decision.verdict, decision.culprits, decision.from_past) == ("hang", (1,), True)
    assert decision.onset == T0 - 847
    assert decision.before.rank == 0 and decision.before.wait == "all_reduce"


def test_two_samples_do_not_confirm_and_a_young_wait_waits_for_the_threshold():
    waiting = rank(0, "collective-wait", "all_reduce", waited=847)
    culprit = rank(1, "idle", None, waited=850)
    # GIVEN only two samples: not yet a hang (one instant and a second do not show that nothing moves)
    early = decide([msgspec.structs.replace(waiting, points=2), msgspec.structs.replace(culprit, points=2)], facts(T0 + 2))
    assert early.verdict != "hang"
    # GIVEN a wait 5 s old at attach: a hang only once it is PAST_HANG_AFTER_S old
    young = [rank(0, "collective-wait", "all_reduce", waited=5), rank(1, "idle", None, waited=6)]
    assert decide(young, facts(T0 + 4)).verdict != "hang"
    later = decide(young, facts(T0 + PAST_HANG_AFTER_S - 5 + 0.1))
    assert later.verdict == "hang" and later.onset == T0 - 5


def test_a_wait_begun_as_the_watch_came_is_named_as_soon_as_the_quickest_rhythm_would():
    # GIVEN a watch attached as rank 1's worker blocked: rank 0 has waited in all_reduce 2 s, rank 1
    # sits on its DataLoader, asleep with its workers, since hangdoc's first sample
    ranks = [rank(0, "collective-wait", "all_reduce", waited=2), rank(1, "dataloader-wait", None, waited=2)]
    # WHEN the wait is 11 s old, every rank outside it asleep for 9 s of samples
    decision = decide(ranks, facts(T0 + 9))
    # THEN it is a hang of rank 1: the floor a learned rhythm keeps (10 s), not a longer one, since
    # here the kernel dates the wait and nothing else in the job moves
    assert (decision.verdict, decision.culprits, decision.from_past) == ("hang", (1,), True)
    assert PAST_HANG_AFTER_S == HANG_FLOOR_S
    # and 1 s short of it, not yet
    assert decide(ranks, facts(T0 + PAST_HANG_AFTER_S - 3)).verdict != "hang"


def test_a_culprit_that_works_keeps_the_rhythm_rule_however_old_the_wait():
    # GIVEN rank 0 waiting in a barrier for 10 min while rank 1 validates (its CPU busy, no step seen yet)
    ranks = [rank(0, "collective-wait", "barrier", waited=600),
             rank(1, "compute", None, waited=0.0, still=False, progress="slow")]
    # WHEN decided after 8 s of watching
    decision = decide(ranks, facts(T0 + 8))
    # THEN not a hang: a long step is told from a stuck one by its rhythm, not by the wait
    assert decision.verdict == "suspect" and not decision.from_past
    # and the past still dates the wait
    assert decision.onset == T0 - 600


def test_a_rank_that_stepped_while_watched_is_no_evidence_of_a_stall():
    # GIVEN the waiting rank off the CPU for 60 s, but rank 1 stepped 1 s ago
    ranks = [rank(0, "collective-wait", "barrier", waited=60),
             rank(1, "idle", None, waited=0.5, steps=3, last_step=T0 + 7)]
    decision = decide(ranks, facts(T0 + 8))
    # THEN no evidence of the past is used
    assert decision.before is None and decision.verdict != "hang"


def test_a_given_threshold_counts_the_past_too():
    ranks = [rank(0, "collective-wait", "all_reduce", waited=100), rank(1, "idle", None, waited=101)]
    assert decide(ranks, facts(T0 + 4, hang_after=300)).verdict != "hang"
    decision = decide([msgspec.structs.replace(r, last_ran=T0 - 400) for r in ranks], facts(T0 + 4, hang_after=300))
    assert decision.verdict == "hang" and decision.from_past


def test_a_bundle_without_the_kernels_past_decides_as_before():
    # GIVEN an older bundle's digests (no off-CPU time read)
    ranks = [rank(0, "collective-wait", "all_reduce"), rank(1, "idle", None)]
    decision = decide(ranks, facts(T0 + 20))
    # THEN the default threshold (60 s) still stands
    assert decision.verdict == "suspect" and decision.before is None
    assert decide(ranks, facts(T0 + 61)).verdict == "hang"


def test_ranks_all_in_collectives_of_different_kinds_are_named_from_the_past():
    # GIVEN rank 1 in all_gather and rank 0 in all_reduce, both asleep for 40 s (a skipped collective)
    ranks = [rank(0, "collective-wait", "all_reduce", waited=40), rank(1, "collective-wait", "all_gather", waited=41)]
    decision = decide(ranks, facts(T0 + 4))
    assert decision.verdict == "hang" and decision.from_past and decision.mismatch


# --- what the kernel says -------------------------------------------------------------------


def _sched(root, pid: str, exec_start_ms: float) -> None:
    path = root / pid / "task" / pid if pid.isdigit() else root / pid
    path.mkdir(parents=True, exist_ok=True)
    (path / "sched").write_text(f"python (4242, #threads: 3)\n{'-' * 40}\n"
                                f"se.exec_start                                :      {exec_start_ms:.6f}\n"
                                "se.vruntime                                  :          3059.761559\n")


def test_off_cpu_time_is_the_threads_exec_start_against_the_readers_own(tmp_path):
    # GIVEN a /proc where the reader's clock is at 900,000 ms and pid 4242 last ran at 53,000 ms
    _sched(tmp_path, "thread-self", 900_000.0)
    _sched(tmp_path, "4242", 53_000.0)
    procfs = ProcFS(tmp_path)
    now = procfs.sched_clock_ms()
    # THEN it has been off the CPU for 847 s; a thread that ran "after" the reader reads 0, never negative
    assert procfs.off_cpu_s(4242, now) == 847.0
    _sched(tmp_path, "4243", 900_010.0)
    assert procfs.off_cpu_s(4243, now) == 0.0
    # and a process the kernel shows no statistics for, or no clock at all, gives None
    assert procfs.off_cpu_s(4244, now) is None
    assert procfs.off_cpu_s(4242, None) is None


def test_off_cpu_time_of_a_real_sleeping_process(tmp_path):
    procfs = ProcFS()
    if procfs.sched_clock_ms() is None:
        pytest.skip("this kernel shows no scheduler statistics (CONFIG_SCHED_DEBUG)")
    # One CPU for this thread and the child (it inherits the affinity): each CPU keeps its own
    # scheduler clock, and on a VM two of them have been seen seconds apart, which is the VM's
    # clock, not what this test is about.
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        _off_cpu_grows_while_asleep(procfs)
    finally:
        os.sched_setaffinity(0, cpus)


def _off_cpu_grows_while_asleep(procfs) -> None:
    # GIVEN a process asleep since it started
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.write('up\\n'); sys.stdout.flush(); "
                              "import time; time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()
        time.sleep(0.5)        # on a loaded machine it may reach its sleep some time after saying "up"
        # WHEN read twice, 1.5 s apart
        first = procfs.off_cpu_s(child.pid, procfs.sched_clock_ms())
        time.sleep(1.5)
        second = procfs.off_cpu_s(child.pid, procfs.sched_clock_ms())
        # THEN it was off the CPU at the first read, and 1.5 s longer at the second
        assert first is not None and second is not None and first >= 0.0, (first, second)
        assert 1.2 <= second - first <= 3.0, (first, second)
    finally:
        child.kill()
        child.wait()


# --- a process still or working --------------------------------------------------------------


def _points(*cpu_io: tuple[float, int], every: float = 2.0) -> list[Point]:
    return [Point(T0 + i * every, None, (), cpu, io) for i, (cpu, io) in enumerate(cpu_io)]


@pytest.mark.parametrize("series, expected", [
    # a DataLoader poll and a stats thread's tick: 10 ms ticks now and then
    ([(1.00, 0), (1.02, 0), (1.02, 0), (1.04, 100)], True),
    ([(1.0, 0), (2.9, 0), (4.8, 0)], False),                   # computing: most of a CPU
    ([(1.0, 0), (1.0, 5_000_000), (1.0, 9_000_000)], False),  # reading a shard
    ([(1.0, 0)], False),                                       # one point says nothing
])
def test_still_is_a_share_of_a_cpu_and_of_bytes_over_the_whole_watch(series, expected):
    assert still(_points(*series)) is expected


# --- the words -------------------------------------------------------------------------------


def test_the_report_says_what_was_known_before_attach_and_the_onset_as_a_lower_bound():
    before = BeforeAttach(waited_s=847.0, rank=0, wait="all_reduce", others_asleep=True, decided=True,
                          log="/data/run/train.log", log_quiet_s=851.0)
    report = Report(schema="hangdoc/report-v1", verdict="hang", detected_after_s=851.2, culprit_ranks=(1,),
                    findings=(), ranks=(), samples=3, before=before,
                    threshold=Threshold(source="past", hang_after_s=15.0, longest_step_s=None, steps_seen=0,
                                        quiet_s=851.2, signal="loop"))
    assert headline(report) == ("HANG: rank 1 is the culprit (no step for at least 14 min; stalled at least "
                                "14 min before hangdoc attached)")
    assert before_line(report) == ("Before hangdoc attached: rank 0 had waited in all_reduce for at least 14 min "
                                   "(its main thread had not run since); the job last wrote train.log 14 min before.")
    assert threshold_line(report) == (
        "Progress: a rank has waited for at least 14 min, 14 min of it before hangdoc attached, and every rank "
        "outside the wait has been asleep since hangdoc's first sample (no step, CPU, I/O or new frame in 3 samples), "
        "so hang once a wait is 15 s old.")
    # a wait that began as hangdoc attached is not said to have begun before it
    young = dataclasses.replace(report, before=dataclasses.replace(before, waited_s=0.3), detected_after_s=16.0)
    assert headline(young) == "HANG: rank 1 is the culprit (no step for at least 16 s)"
    assert before_line(young) == "Before hangdoc attached: the job last wrote train.log 14 min before."
    # a spinner's wait dated by the ranks outside it says so
    peers = dataclasses.replace(report, before=dataclasses.replace(before, wait="a collective's Work", told_by="peers",
                                                                   waited_s=12.0, log=None))
    assert before_line(peers) == ("Before hangdoc attached: rank 0 had waited in a collective's Work for at least 12 s "
                                  "(no rank outside the wait, which it needs, had run since).")


def test_on_nccl_the_flight_recorders_last_completion_dates_the_stall():
    # GIVEN ranks whose main threads spin at a CUDA sync point (no off-CPU time: NCCL), and the
    # Flight Recorder's last completed collective 100 s before hangdoc's first sample
    ranks = [rank(0, "collective-wait", "all_reduce", still=False), rank(1, "compute", None, still=False)]
    decision = decide(ranks, JobFacts(first=T0, now=T0 + 4, logs=(), exit_code=None, hang_after=None,
                                      collective_steps=(T0 - 100.0,)))
    # THEN the quiet counts from that completion: past the default 60 s, a hang, dated from it
    assert decision.verdict == "hang" and decision.onset == T0 - 100.0 and not decision.from_past


def test_the_log_the_job_wrote_last_is_said_with_its_age():
    from hangdoc.analyze.diagnose import Diagnosis
    from hangdoc.model import Bundle, GpuState, Host, Job, LogTail, Snapshot
    from hangdoc.analyze.facts import before_attach

    bundle = Bundle(schema="hangdoc/bundle-v1", hangdoc_version="0", created=T0, host=Host("vm", "x86_64", "6.1", 2, "3.11", None),
                    job=Job(None, None, None, 2, None, ()),
                    samples=(Snapshot(time=T0, took_s=0.1, processes=(), gpu=GpuState(status="unavailable")),),
                    logs=(LogTail("/runs/a/train.log", ("step 10",), T0 - 851.0),
                          LogTail("/runs/a/err.log", ("warn",), T0 - 3000.0)))
    diagnosis = Diagnosis("hang", (1,), T0 - 847, T0 + 4, ())
    told = before_attach(bundle, diagnosis)
    assert (told.log, told.log_quiet_s, told.waited_s) == ("/runs/a/train.log", 851.0, None)


def test_the_flight_recorders_oldest_pending_collective_dates_the_wait_on_a_recorded_job():
    # GIVEN the recorded fr-straggler job (gloo, Flight Recorder on; no off-CPU time in that bundle):
    # rank 0's dump shows all_reduce #11 enqueued and not completed, rank 1 never enqueued it
    from pathlib import Path

    from hangdoc.analyze.diagnose import diagnose
    from hangdoc.analyze.flight import fr_pending
    from hangdoc.bundle.files import load_bundle

    bundle = load_bundle(Path(__file__).resolve().parents[1] / "golden" / "fr-straggler" / "bundle.json")
    created, rank, op = fr_pending(bundle.flight_records)
    assert (rank, op) == (0, "all_reduce") and created < bundle.samples[0].time
    # WHEN diagnosed
    diagnosis = diagnose(bundle)
    # THEN the wait is dated from it, told by the Flight Recorder, and the onset is no later
    assert diagnosis.before.told_by == "flight-recorder" and diagnosis.before.since == created
    assert diagnosis.onset <= created


def test_the_loop_position_against_the_process_age_bounds_the_mean_step():
    before = BeforeAttach(waited_s=847.0, rank=0, wait="all_reduce", loop_counter="step", loop_value=40_000,
                          loop_age_s=7200.0)
    report = Report(schema="hangdoc/report-v1", verdict="suspect", detected_after_s=None, culprit_ranks=(1,),
                    findings=(), ranks=(), samples=1, before=before)
    assert before_line(report) == ("Before hangdoc attached: rank 0 had waited in all_reduce for at least 14 min (its "
                                   "main thread had not run since); rank 0's loop stood at step=40,000 2.0 h after it "
                                   "started (at most 0.18 s a step on average).")


def test_a_wait_older_than_the_threshold_is_a_hang_even_while_the_culprit_works():
    # GIVEN rank 0 off the CPU in all_reduce for 118 s when hangdoc arrived, rank 1 waiting on its
    # DataLoader while its workers decompress (busy: not asleep), no step seen, no --hang-after
    ranks = [rank(0, "collective-wait", "all_reduce", waited=118),
             rank(1, "dataloader-wait", None, waited=0.0, still=False, progress="slow")]
    # WHEN three samples over 4 s show no step
    decision = decide(ranks, facts(T0 + 4))
    # THEN a hang of rank 1: no step for 118 s is past the default 60 s, counted from the wait's start
    # (a watch attached before the fault would have called it at 60 s)
    assert (decision.verdict, decision.culprits, decision.from_past) == ("hang", (1,), True)
    assert decision.onset == T0 - 118 and not decision.before.others_asleep


def test_a_working_culprits_wait_younger_than_the_threshold_waits_for_it():
    # GIVEN the same, with the wait 30 s old at attach
    ranks = [rank(0, "collective-wait", "all_reduce", waited=30),
             rank(1, "compute", None, waited=0.0, still=False, progress="slow")]
    # THEN not yet at 4 s (34 s of no step), a hang once 60 s have passed since the wait began
    assert decide(ranks, facts(T0 + 4)).verdict != "hang"
    later = decide(ranks, facts(T0 + 30.5))
    assert later.verdict == "hang" and later.onset == T0 - 30 and later.from_past


def test_a_pause_in_a_barrier_however_old_keeps_the_rule_from_the_first_sample():
    # GIVEN rank 0 in a barrier for 10 min while rank 1 validates (computes): a pause
    ranks = [rank(0, "collective-wait", "barrier", waited=600),
             rank(1, "compute", None, waited=0.0, still=False, progress="slow")]
    # THEN not a hang from the past at 4 s, nor at 59 s of watching
    for now in (T0 + 4, T0 + 59):
        assert decide(ranks, facts(now)).verdict != "hang"


def test_the_report_says_the_wait_was_past_the_threshold_while_a_rank_worked():
    # GIVEN the decision above, as the report carries it
    report = Report(schema="hangdoc/report-v1", verdict="hang", detected_after_s=122.0, culprit_ranks=(1,),
                    findings=(), ranks=(), samples=3,
                    threshold=Threshold(source="past", hang_after_s=60.0, longest_step_s=None, steps_seen=0,
                                        quiet_s=122.0, signal="loop"),
                    before=BeforeAttach(waited_s=118.0, rank=0, wait="all_reduce", others_asleep=False, decided=True))
    line = threshold_line(report)
    # THEN it says the threshold was passed from the wait's start, and that a rank still works
    assert "past the 60 s threshold, counted from the wait's start" in line
    assert "a rank outside the wait still works" in line and "asleep" not in line


def test_a_rank_spinning_in_its_wait_from_the_first_sample_with_the_culprit_asleep_is_a_hang_after_the_past_threshold():
    # GIVEN rank 0 spinning on its collective's Work (NCCL's shape: on the CPU when read, the kernel
    # dates nothing) since hangdoc's first sample, rank 1 asleep waiting on its DataLoader, though
    # its main thread ran at that sample (the kernel dates nothing of it either)
    ranks = [rank(0, "collective-wait", "a collective's Work", waited=0, still=False, progress="slow"),
             rank(1, "dataloader-wait", "DataLoader.__next__", waited=0)]
    # WHEN judged before and after the wait is PAST_HANG_AFTER_S old
    early, late = decide(ranks, facts(T0 + PAST_HANG_AFTER_S - 1)), decide(ranks, facts(T0 + PAST_HANG_AFTER_S + 0.5))
    # THEN not yet, then a hang of rank 1 dated from the first sample: nothing outside the wait moves,
    # so nothing will end it (the default 60 s, which it waited for before, is for a rank that works)
    assert early.verdict != "hang"
    assert (late.verdict, late.culprits) == ("hang", (1,)) and late.onset == T0
    assert late.before.told_by == "watch"


def test_a_spinners_wait_is_dated_by_the_ranks_it_needs_off_the_cpu_since_before_the_first_sample():
    # GIVEN rank 0 spinning on its collective's Work since hangdoc's first sample, and rank 1, which
    # the collective needs, asleep on its DataLoader with its main thread off the CPU for 12 s
    spinner = rank(0, "collective-wait", "a collective's Work", waited=0, still=False, progress="slow")
    ranks = [spinner, rank(1, "dataloader-wait", "DataLoader.__next__", waited=12)]
    # WHEN judged 4 s after the first sample (three samples)
    decision = decide(ranks, facts(T0 + 4))
    # THEN a hang of rank 1 dated 12 s before the first sample, told by the peers: the same verdict
    # the job gets when its waiters sleep in the collective instead of spinning
    assert (decision.verdict, decision.culprits, decision.onset) == ("hang", (1,), T0 - 12)
    assert decision.before.told_by == "peers"
    sleeping = decide([rank(0, "collective-wait", "all_reduce", waited=13), ranks[1]], facts(T0 + 4))
    assert (sleeping.verdict, sleeping.culprits) == ("hang", (1,))
    # AND a rank outside the wait that still works dates nothing: the default threshold, from the first sample
    working = decide([spinner, rank(1, "dataloader-wait", "DataLoader.__next__", waited=12, still=False,
                                    progress="slow")], facts(T0 + 4))
    assert working.verdict != "hang"
    # AND one rank outside the wait that ran at the first sample leaves the date at that sample
    mixed = decide([spinner, ranks[1], rank(2, "idle", "a lock", waited=0)], facts(T0 + 4))
    assert mixed.verdict != "hang"
