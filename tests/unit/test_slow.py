"""Slow is a verdict: the straggler and data-bound calls over the ranks' time shares, one rule at a time."""
from __future__ import annotations

import dataclasses

import pytest

from hangdoc.analyze.diagnose import JobFacts, decide
from hangdoc.base.stats import interval
from hangdoc.analyze.slow import slow_call
from hangdoc.model import RankDigest, ShareCounts, StepSummary
from hangdoc.model import Ending
from hangdoc.report.judge import End, exit_code

T0 = 1_700_000_000.0


def half(n=15, step_wait=0, other_wait=0, data=0, compute=None, io=0) -> ShareCounts:
    compute = n - step_wait - other_wait - data - io if compute is None else compute
    return ShareCounts(n, step_wait, other_wait, data, compute, io)


def rank(n: int, *halves: ShareCounts, gone: bool = False) -> RankDigest:
    return RankDigest(rank=n, pid=100 + n, host="vm", group_rank=0, state="compute", detail=None, top_frame=None,
                      stack_key="k", state_since=T0, blocked_since=None, exited_at=T0 + 60 if gone else None,
                      progress="active", rhythm=StepSummary(40, 1.2, T0 + 59.5, True), unmoved_since=None,
                      points=40, shares=tuple(halves))


def test_a_rank_the_others_wait_for_in_every_step_is_the_straggler():
    # GIVEN rank 0 waiting in the gradient all_reduce in 9 of 15 samples of each half; rank 1 computing
    ranks = [rank(0, half(step_wait=9), half(step_wait=10)), rank(1, half(), half(step_wait=1))]
    # WHEN the job is judged
    call = slow_call(ranks)
    # THEN rank 1 is the straggler, the others lose 63 % of each step, the speed-up bound follows
    assert (call.kind, call.stragglers, call.doing) == ("straggler", (1,), "compute")
    assert call.others_wait == pytest.approx(19 / 30, abs=1e-3)
    assert call.speedup == pytest.approx(1 / (1 - (19 / 30 - 1 / 30)), abs=0.01)
    # and the verdict is slow, exit 8; `run` fails on it only when asked to
    decision = decide(ranks, JobFacts(first=T0, now=T0 + 60, logs=(), exit_code=None, hang_after=None))
    assert (decision.verdict, decision.culprits) == ("slow", (1,))
    assert exit_code(decision.verdict) == 8
    ended = End(Ending.ENDED, returncode=0, run=True)
    assert exit_code("slow", ended, slow=True) == 0
    assert exit_code("slow", dataclasses.replace(ended, fail_on_slow=True), slow=True) == 8
    assert exit_code("slow", End(Ending.ENDED, returncode=1, run=True, fail_on_slow=True), slow=True) == 1


@pytest.mark.parametrize("shape, ranks", [
    ("taking turns (jitter)", [rank(0, half(step_wait=4), half(step_wait=5)), rank(1, half(step_wait=6), half(step_wait=3))]),
    ("a pause in a barrier (validation)", [rank(0, half(other_wait=9), half(other_wait=8)), rank(1, half(), half())]),
    ("only in one half (one slow stretch)", [rank(0, half(step_wait=12), half(step_wait=1)), rank(1, half(), half())]),
    ("a rank writing a checkpoint", [rank(0, half(step_wait=9), half(step_wait=9)), rank(1, half(io=12), half(io=11))]),
    ("shares too close to tell", [rank(0, half(n=6, step_wait=3), half(n=6, step_wait=2)),
                                  rank(1, half(n=6, step_wait=1), half(n=6))]),
])
def test_balanced_jobs_and_pauses_are_never_slow(shape, ranks):
    assert slow_call(ranks) is None, shape


def test_a_rank_without_enough_samples_keeps_the_job_from_being_called_slow():
    # GIVEN a straggler pattern, but rank 2 joined late and has no shares yet
    ranks = [rank(0, half(step_wait=9), half(step_wait=10)), rank(1, half(), half()), rank(2)]
    assert slow_call(ranks) is None


def test_every_rank_waiting_on_its_data_is_data_bound():
    ranks = [rank(0, half(data=11), half(data=12)), rank(1, half(data=9), half(data=10))]
    call = slow_call(ranks)
    assert (call.kind, call.stragglers) == ("data-bound", ())
    assert call.others_wait == pytest.approx(19 / 30, abs=1e-3)
    # one rank fed on time: not data-bound (and not a straggler either: nobody waits in the step)
    assert slow_call([ranks[0], rank(1, half(data=2), half(data=3))]) is None


def test_a_job_that_ended_well_slowly_reads_slow():
    ranks = [rank(0, half(step_wait=9), half(step_wait=10), gone=True), rank(1, half(), half(), gone=True)]
    decision = decide(ranks, JobFacts(first=T0, now=T0 + 70, logs=(), exit_code=0, hang_after=None))
    assert (decision.verdict, decision.culprits) == ("slow", (1,))


def test_many_ranks_one_straggler():
    ranks = [rank(r, half(step_wait=8 + r % 3), half(step_wait=9)) for r in range(7)] + [rank(7, half(), half())]
    call = slow_call(ranks)
    assert call.stragglers == (7,)


@pytest.mark.parametrize("hits, n", [(0, 12), (6, 12), (12, 12), (19, 30)])
def test_the_interval_holds_the_share_and_stays_in_0_1(hits, n):
    low, high = interval(hits, n)
    assert 0.0 <= low <= hits / n <= high <= 1.0
    assert high - low <= 0.6


def test_a_wait_found_in_every_sample_bounds_the_speed_up_by_the_samples_not_by_arithmetic():
    # GIVEN rank 0 found waiting in the gradient all_reduce in all 26 of its samples, rank 1 never
    # (the bz2-straggler golden: 13, at "up to 1000.0x faster")
    ranks = [rank(0, half(n=13, step_wait=13), half(n=13, step_wait=13)), rank(1, half(n=13), half(n=13))]
    # WHEN the job is judged
    call = slow_call(ranks)
    # THEN it is a straggler, and what is left of a step is taken as one sample's worth: up to 26x
    assert (call.kind, call.stragglers, call.others_wait) == ("straggler", (1,), 1.0)
    assert call.speedup == pytest.approx(26.0)
    # AND a data-bound job whose every sample waited on data is bounded the same way
    starved = [rank(0, half(n=12, data=12), half(n=12, data=12)), rank(1, half(n=12, data=12), half(n=12, data=12))]
    assert slow_call(starved).speedup == pytest.approx(24.0)


def test_a_job_ending_raggedly_keeps_its_pace_while_its_last_rank_finishes():
    # GIVEN the compute-2x shape, and rank 0 already exited (0) while rank 1 finishes its last step
    ranks = [rank(0, half(step_wait=9), half(step_wait=10), gone=True), rank(1, half(), half(step_wait=1))]
    # WHEN the job is judged in that last round
    call = slow_call(ranks)
    # THEN still slow, rank 1: the round before the end says what the ended job's report says
    assert call is not None and call.stragglers == (1,)
    # AND a live rank without shares yet still holds the call back; a gone one without shares does not
    assert slow_call(ranks + [rank(2)]) is None
    assert slow_call(ranks + [rank(2, gone=True)]).stragglers == (1,)


def queued(digest: RankDigest, share: float | None) -> RankDigest:
    import msgspec

    return msgspec.structs.replace(digest, runqueue=share)


def test_a_straggler_whose_main_thread_waits_for_a_cpu_is_slowed_by_the_machine():
    # GIVEN rank 0 waiting in the gradient all_reduce most of each step and rank 1 caught computing,
    # but rank 1's main thread waited on a run queue 45 % of the time and rank 0's 5 %
    ranks = [queued(rank(0, half(step_wait=9), half(step_wait=10)), 0.05),
             queued(rank(1, half(), half(step_wait=1)), 0.45)]
    # WHEN the job is judged
    call = slow_call(ranks)
    # THEN rank 1 is still the straggler, but what keeps it is a CPU, not its compute, and it says by how much
    assert (call.kind, call.stragglers, call.doing) == ("straggler", (1,), "cpu-wait")
    assert ("cpu-wait", 0.45, 0.05) in call.excess


@pytest.mark.parametrize("mine, theirs", [(0.30, 0.28), (0.12, 0.0), (None, 0.05), (0.45, None)])
def test_a_straggler_queued_like_the_others_or_unread_is_kept_by_its_compute(mine, theirs):
    # GIVEN the same straggler, its run queue like the others' (a loaded machine, evenly), too short
    # to matter, or not read
    ranks = [queued(rank(0, half(step_wait=9), half(step_wait=10)), theirs),
             queued(rank(1, half(), half(step_wait=1)), mine)]
    # WHEN judged THEN its own compute keeps it
    assert slow_call(ranks).doing == "compute"


def test_the_run_queue_share_is_read_over_the_ranks_window(monkeypatch):
    # GIVEN a rank's window of 11 samples 1 s apart whose main thread's run-queue time grows 0.3 s a second
    from hangdoc.analyze import shares
    from hangdoc.analyze.timeline import Point, Timeline
    from hangdoc.model import ThreadCounters
    from hangdoc.analyze.classify import Reading

    points = tuple(Point(T0 + i, Reading("compute", None, None), (), float(i), 0,
                         main=ThreadCounters(float(i), 0, 0, runqueue_s=0.3 * i if i != 4 else None))
                   for i in range(11))
    line = Timeline(100, points)
    monkeypatch.setattr(shares, "window", lambda tl: list(tl.points))
    # WHEN its share is read THEN 0.3, the samples without the counter passed over
    assert shares.runqueue_share(line) == pytest.approx(0.3)
    # AND none where the kernel never said
    assert shares.runqueue_share(Timeline(100, tuple(dataclasses.replace(p, main=None) for p in points))) is None


def test_a_straggler_whose_own_workers_take_its_cpus_is_kept_by_its_data():
    # GIVEN the straggler queued for a CPU 45 % of the time, its DataLoader workers using 1.6 cores
    # against the others' 0.3, and it caught waiting on its data more than they are
    import msgspec

    late = msgspec.structs.replace(queued(rank(1, half(data=4), half(data=5, step_wait=1)), 0.45), workers_cpu=1.6)
    other = msgspec.structs.replace(queued(rank(0, half(step_wait=9), half(step_wait=10)), 0.05), workers_cpu=0.3)
    # WHEN judged
    call = slow_call([other, late])
    # THEN its data keeps it (its own workers are what it queues behind), not the machine
    assert (call.stragglers, call.doing) == ((1,), "dataloader-wait")
    assert ("cpu-wait", 0.45, 0.05) in call.excess
