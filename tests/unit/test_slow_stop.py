"""A watch of a slow job ends once the slow verdict is settled: the same way round after round,
over the threshold; each outcome of the stop rule (report/judge.py) tested on its own."""
from __future__ import annotations

import dataclasses

from hangdoc.model import REPORT_SCHEMA, Report, Slowness, SlowKind, StopReason, Threshold, Verdict
from hangdoc.report.judge import SLOW_SETTLED_ROUNDS, SLOW_SETTLED_S, Judgement, _slow_streak


def _report(verdict=Verdict.SLOW, stragglers=(1,), hang_after_s=12.0) -> Report:
    slow = Slowness(SlowKind.STRAGGLER, stragglers, 0.44, 0.0, 1.8, "compute", 16) if verdict == Verdict.SLOW else None
    return Report(schema=REPORT_SCHEMA, verdict=verdict, detected_after_s=None, culprit_ranks=stragglers,
                  findings=(), ranks=(), slow=slow,
                  threshold=Threshold("learned", hang_after_s, 4.0, 10, 1.0, "loop"))


def _rounds(reports, every_s: float) -> Judgement:
    """Judge the reports one round after another, `every_s` apart, as a watch does."""
    prior = None
    for i, report in enumerate(reports):
        prior = Judgement(report, None, 8, slow_streak=_slow_streak(report, 1000.0 + i * every_s, prior))
    return prior


def test_slow_the_same_way_for_enough_rounds_and_seconds_ends_the_watch():
    # GIVEN a job read slow, rank 1 the straggler, every 8 s for SLOW_SETTLED_ROUNDS rounds (32 s)
    last = _rounds([_report()] * SLOW_SETTLED_ROUNDS, every_s=8.0)
    # WHEN the stop rule reads the last judgement THEN the verdict is settled
    assert last.settled_slow and last.slow_streak[2] == SLOW_SETTLED_ROUNDS
    assert last.stop is None and StopReason("slow") is StopReason.SLOW


def test_too_few_rounds_or_too_short_a_span_does_not_end_it():
    # GIVEN one round fewer, or the rounds within less than SLOW_SETTLED_S
    assert not _rounds([_report()] * (SLOW_SETTLED_ROUNDS - 1), every_s=20.0).settled_slow
    assert not _rounds([_report()] * 20, every_s=(SLOW_SETTLED_S - 1) / 19).settled_slow


def test_a_threshold_longer_than_the_floor_must_pass_too():
    # GIVEN a job whose hang threshold is 90 s (slow steps), read slow every 10 s
    reports = [_report(hang_after_s=90.0)] * 9
    # WHEN 80 s have passed THEN not yet; WHEN 100 s have THEN settled
    assert not _rounds(reports, every_s=10.0).settled_slow
    assert _rounds([_report(hang_after_s=90.0)] * 11, every_s=10.0).settled_slow


def test_another_straggler_or_a_healthy_round_starts_the_count_again():
    # GIVEN slow rounds where the straggler changed, or one healthy round in between
    changed = [_report()] * 6 + [_report(stragglers=(0,))] * 2
    broken = [_report()] * 6 + [_report(verdict=Verdict.HEALTHY)] + [_report()] * 2
    # THEN the streak is only the latest rounds', and the watch goes on
    assert _rounds(changed, every_s=10.0).slow_streak[2] == 2 and not _rounds(changed, every_s=10.0).settled_slow
    assert _rounds(broken, every_s=10.0).slow_streak[2] == 2


def test_judging_the_same_round_again_does_not_count_twice():
    # GIVEN a settled slow judgement WHEN the same evidence is judged again (the final report)
    last = _rounds([_report()] * SLOW_SETTLED_ROUNDS, every_s=8.0)
    again = dataclasses.replace(last, slow_streak=_slow_streak(last.report, last.slow_streak[1], last))
    # THEN the streak stands as it was
    assert again.slow_streak == last.slow_streak


def test_a_long_batch_whose_data_reads_one_lap_again_does_not_settle_until_told():
    # GIVEN a long batch read slow, data-bound, for enough rounds and seconds, while a file of its
    # workers reads whole laps of one pass at several samples, too few passes yet to call it a loop
    from hangdoc.model import DataPace
    pace = DataPace(1, 0, 201, "/data/libri000.tar.bz2", 2.0e6, 9, 20_856_832, 55_130_241, converging=True)
    base = _report()
    held = dataclasses.replace(base, slow=dataclasses.replace(base.slow, kind=SlowKind.DATA_BOUND, waited_s=70.0,
                                                              next_batch_s=70.0, pace=pace))
    told = dataclasses.replace(held, slow=dataclasses.replace(held.slow, pace=dataclasses.replace(pace, converging=False)))
    # WHEN the stop rule reads it THEN it waits for the next passes; once they tell, it settles
    assert not _rounds([held] * SLOW_SETTLED_ROUNDS, every_s=8.0).settled_slow
    assert _rounds([held] * (SLOW_SETTLED_ROUNDS - 1) + [told], every_s=8.0).settled_slow
