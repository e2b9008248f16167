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


def test_the_tier_holds_every_zoo_case_and_its_golden_cases_name_real_ones():
    # GIVEN the cases the recording scripts make WHEN the tier is listed THEN each zoo case has its
    # recording, and each golden one is a case of tests/golden_record.py
    import golden_record
    import replay_record

    zoo = [c for c in CASES if not c.startswith(("golden-", "live-", "flip-"))]
    assert sorted(c.name for c in replay_record.cases()) == zoo
    assert {c[len("golden-"):] for c in CASES if c.startswith("golden-")} <= set(golden_record.BY_NAME)


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
    must = expected.get("rules") or ([expected["rule"]] if expected.get("rule") else [])
    assert set(must) <= set(got[2]), got
    assert not set(expected.get("look_alikes") or ()) & set(got[2]), got
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


def test_every_real_job_test_left_to_the_tier_names_a_recorded_case():
    # GIVEN the real-job tests that `make test` skips because the tier replays their verdicts
    import re

    integration = Path(__file__).resolve().parents[1] / "integration"
    named = {case for path in integration.glob("test_*.py")
             for call in re.findall(r"@replayed\(([^)]*)\)", path.read_text())
             for case in re.findall(r'"([^"]+)"', call)}
    # THEN each case they name is recorded here
    assert named and named <= set(CASES), sorted(named - set(CASES))


def test_a_restart_that_could_not_connect_is_the_launchers_failure_not_the_jobs():
    # GIVEN a recorded watch of a torchrun restart whose new ranks were refused by gloo's connect
    report = replay(REPLAY / "flip-restart-connect-refused").report
    # THEN the crash's cause says the restart failed in process-group setup, of the launcher's making
    cause = " ".join(report.cause)
    assert "failed in init_process_group" in cause and "the launcher's own making" in cause, cause


def test_the_tier_holds_no_path_of_the_checkout_that_recorded_it():
    # GIVEN every recording of the tier WHEN read THEN the checkout's own path is written as the
    # neutral one (tests/replay_record.py: keep_recording), never this machine's
    import zstandard

    here = str(REPLAY.parents[1]).encode()
    for name in CASES:
        with open(REPLAY / name / "recording.zst", "rb") as handle:
            raw = zstandard.ZstdDecompressor().stream_reader(handle).read()
        assert here not in raw, name
