"""The watch round as a pure step: what a round saw and the state before it decide the stop."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from hangdoc.bundle.files import load_bundle
from hangdoc.live.step import HURRY_ROUNDS, Policy, Seen, State, watch_step
from hangdoc.model import StopReason

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def bundle_of(name: str):
    return load_bundle(GOLDEN / name / "bundle.json")


def test_a_hang_seen_before_the_jobs_own_records_were_asked_for_waits_one_round_for_them():
    # GIVEN a hung job that keeps a Flight Recorder, first read hung at this round
    hung = bundle_of("uneven-shards")
    policy = Policy(hang_after_s=hung.options.hang_after_s)
    # WHEN the step judges the round
    state, judgement, decision = watch_step(State(), Seen(hung, 10.0, own_records=True), policy)
    # THEN the hang is named but the watch goes on at once, and asks for the records next round
    assert judgement.stop is StopReason.HANG
    assert decision.stop is None and decision.flight_due and decision.at_once and state.stuck
    # AND the next round, the records read, stops at the hang
    _, _, decision = watch_step(state, Seen(hung, 10.5, own_records=True), policy)
    assert decision.stop is StopReason.HANG and not decision.at_once


def test_a_hang_waits_for_a_blocked_workers_native_read_once_a_watch():
    # GIVEN a hung job whose blocked worker the sampling policy would read natively next round
    hung = bundle_of("uneven-shards")
    policy = Policy(hang_after_s=hung.options.hang_after_s)
    # WHEN two rounds read the hang with that read still due
    state, _, first = watch_step(State(), Seen(hung, 10.0, probes_due=True), policy)
    _, _, second = watch_step(state, Seen(hung, 10.5, probes_due=True), policy)
    # THEN the first waits a round for it, the second stops whatever is still due
    assert first.stop is None and first.probe_due
    assert second.stop is StopReason.HANG and not second.probe_due


def test_the_timeout_and_the_commands_end_stop_a_round_that_names_nothing():
    # GIVEN a healthy job's rounds
    healthy = bundle_of("checkpoint-pause")
    # WHEN a round comes at the --timeout, or after the command ended
    _, _, timed = watch_step(State(), Seen(healthy, 30.0), Policy(timeout_s=30.0))
    _, _, ended = watch_step(State(), Seen(healthy, 5.0, ended=True), Policy(timeout_s=30.0))
    _, _, going = watch_step(State(), Seen(healthy, 5.0), Policy(timeout_s=30.0))
    # THEN the first stops at the timeout, the second at the end, the third goes on
    assert (timed.stop, ended.stop, going.stop) == (StopReason.TIMEOUT, StopReason.ENDED, None)


def test_the_step_is_the_same_for_the_same_rounds():
    # GIVEN one bundle's rounds WHEN stepped twice from a fresh state THEN the same judgements come
    hung = bundle_of("frozen-lock")
    policy = Policy(hang_after_s=hung.options.hang_after_s)
    runs = []
    for _ in range(2):
        state, seen = State(), []
        for i in range(1, len(hung.samples) + 1):
            state, judgement, decision = watch_step(
                state, Seen(dataclasses.replace(hung, samples=hung.samples[:i]), float(i)), policy)
            seen.append((judgement.report.verdict, judgement.report.culprit_ranks, decision.stop))
        runs.append(seen)
    assert runs[0] == runs[1]


def rounds(bundle, policy):
    """The step over the bundle's rounds as a watch takes them: (verdict, decision) per round."""
    state, out = State(), []
    for n in range(2, len(bundle.samples) + 1):
        part = dataclasses.replace(bundle, samples=bundle.samples[:n])
        state, judgement, decision = watch_step(state, Seen(part, part.last.time - bundle.samples[0].time), policy)
        out.append((judgement.report.verdict, decision))
    return out


def test_a_quiet_past_the_longest_step_takes_the_next_rounds_sooner():
    # GIVEN a job whose rank 1 stopped stepping (compute-straggler), judged round by round
    stalled = rounds(bundle_of("compute-straggler"), Policy())
    # THEN the rounds of its quiet before the hang is named come sooner, the named hang's do not
    assert [d.soon for v, d in stalled if v == "suspect"] and all(d.soon for v, d in stalled if v == "suspect")
    assert not any(d.soon for v, d in stalled if d.stop is not None)


def test_a_job_stepping_in_its_rhythm_keeps_the_interval():
    # GIVEN a slow job whose ranks step every 1.2 s at the longest (compute-2x) WHEN judged round by round
    # THEN no round is taken sooner
    assert not any(d.soon for _, d in rounds(bundle_of("compute-2x"), Policy()))


def test_one_quiet_hurries_a_few_rounds_at_most():
    # GIVEN one round of a quiet past the job's longest step, seen again and again (a quiet that lasts)
    stalled = bundle_of("compute-straggler")
    part = dataclasses.replace(stalled, samples=stalled.samples[:4])
    state, hurried = State(), []
    for i in range(HURRY_ROUNDS + 4):
        state, _, decision = watch_step(state, Seen(part, 5.0), Policy())
        hurried.append(decision.soon)
    # THEN HURRY_ROUNDS of them come sooner, and the rest at the interval
    assert hurried == [True] * HURRY_ROUNDS + [False] * 4
