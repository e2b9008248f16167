"""The replay tier: every recorded zoo watch (tests/replay/, made by tests/replay_record.py) run
again through the watch's step, its verdict held against the job's ground truth, in seconds.

A recording is what the live watch read of a real torchrun job, round by round; replaying it runs
today's analysis and stop policy over those very rounds. So a change that would turn a recorded
healthy job into SLOW, a hang into SUSPECT or move a culprit fails here, without a job to start."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from figures import assert_figures_agree
from hangdoc.live.replay import replay

REPLAY = Path(__file__).resolve().parents[1] / "replay"
CASES = sorted(p.name for p in REPLAY.iterdir() if (p / "recording.zst").exists()) if REPLAY.is_dir() else []


def case(name: str) -> dict:
    return json.loads((REPLAY / name / "case.json").read_text())


def test_the_tier_holds_every_zoo_case():
    # GIVEN the cases the recording script makes WHEN the tier is listed THEN each has its recording
    import replay_record

    assert sorted(c.name for c in replay_record.cases()) == CASES


@pytest.mark.parametrize("name", CASES)
def test_a_recorded_watch_replays_to_its_ground_truth(name):
    # GIVEN a real job's watch, recorded round by round, and the job's ground truth
    expected = case(name)
    # WHEN the recording is replayed through today's step
    replayed = replay(REPLAY / name)
    report = replayed.report
    # THEN the verdict, the culprits and the rule are the ground truth's
    got = (report.verdict, report.culprit_ranks, [f.rule for f in report.findings])
    assert report.verdict == expected["verdict"], got
    assert list(report.culprit_ranks) == expected["culprit_ranks"], got
    if expected["rule"]:
        assert expected["rule"] in got[2], got
    if expected["verdict"] == "healthy":
        assert not any(f.severity.value == "critical" for f in report.findings), got
    # AND a verdict that stops a watch comes within the rounds the live watch read
    if expected["verdict"] in ("hang", "crash"):
        assert replayed.stop_round is not None and replayed.stop_round <= replayed.live_rounds, replayed.summary()
    # AND its figures agree with each other in every format
    assert_figures_agree(report, name)


@pytest.mark.parametrize("name", [c for c in CASES if c.endswith("-learned")])
def test_a_hang_is_found_with_the_threshold_learned_from_the_steps(name):
    # GIVEN a job that stepped healthily for a while, then hung, watched with no --hang-after
    expected = case(name)
    # WHEN replayed
    replayed = replay(REPLAY / name)
    # THEN the hang is found from a threshold learned from the steps it saw, within 40 s of the fault
    threshold = replayed.report.threshold
    assert threshold.source == "learned" and threshold.steps_seen >= 2, threshold
    assert replayed.report.verdict == "hang" and expected["fault_time"] is not None
    assert replayed.bundle.last.time - expected["fault_time"] < 40, replayed.summary()


def test_the_longer_samples_straggler_is_told_its_inputs_are_bigger():
    # GIVEN the recorded watch of a job whose rank 1 gets the corpus's longest samples
    report = replay(REPLAY / "longer-samples").report
    # THEN the slow rank's finding says its inputs are bigger
    slow = next(f for f in report.findings if f.rule == "slow-rank")
    assert "its inputs are bigger" in slow.title, slow.title


@pytest.mark.parametrize("name", CASES[:3])
def test_a_replay_is_the_same_every_time(name):
    # GIVEN a recording WHEN replayed twice THEN the two reports are one, byte for byte, at one round
    from hangdoc.render.json import report_json

    first, second = replay(REPLAY / name), replay(REPLAY / name)
    assert report_json(first.report) == report_json(second.report)
    assert (first.stop_round, first.stop_at_s) == (second.stop_round, second.stop_at_s)
