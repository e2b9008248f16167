"""The zoo under `hangdoc run` on real jobs: the verdict, the culprits and the rule.

Every scenario's verdict is held in the replay tier (tests/unit/test_replay_tier.py), from a real
watch of it recorded by tests/replay_record.py, in seconds. Here a few run end to end, a hang, a
crash and a healthy job: what only a real job shows (the job's own end, its markers, its output) and a check that
today's collection still reads what the recordings hold. HANGDOC_LIVE_ZOO=1 (`make zoo`) runs
every scenario live, as before a release or after a change to what a round reads."""
from __future__ import annotations

import os

import pytest

from figures import assert_figures_agree
from hangdoc.scenarios import SCENARIOS
from hangdoc.scenarios.evaluate import evaluate

pytestmark = [pytest.mark.integration]

EVERY = os.environ.get("HANGDOC_LIVE_ZOO") == "1"
# A hang, a crash and a healthy job end to end (slow: test_ordinary's Lightning straggler); the rest
# live only with HANGDOC_LIVE_ZOO=1.
END_TO_END = ("uneven-shards", "worker-segfault", "healthy")
LIVE = list(SCENARIOS) if EVERY else list(END_TO_END)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("name", LIVE)
def test_scenario_is_diagnosed_as_its_ground_truth(name, tmp_path):
    # GIVEN a real torchrun job reproducing one field failure (or a healthy one)
    scenario = SCENARIOS[name]
    if scenario.needs_gpu:
        pytest.skip(f"{name}: its ground truth is told by the GPUs' readings (NVML); this machine has no GPU")
    # WHEN it runs under `hangdoc run`: healthy jobs at the product's default (the threshold learned
    # from their steps: a false alarm there ends a healthy training), hangs at a short given threshold
    # (a crash is told before the default threshold: no race between the two verdicts)
    hang_after = 6.0 if scenario.verdict == "hang" else None
    result = evaluate(scenario, tmp_path, hang_after=hang_after, interval=0.5, timeout=150.0)
    # THEN the verdict, the culprit ranks and the expected rule match the ground truth
    got = (result.verdict, result.culprits, result.rules)
    assert result.verdict == scenario.verdict, got
    assert result.culprits == tuple(scenario.culprit_ranks), got
    if scenario.expected_rule:
        assert scenario.expected_rule in result.rules, got
    if scenario.verdict == "healthy":
        assert not any(f.severity.value == "critical" for f in result.report.findings), got
    # AND its figures agree with each other in every format (tests/figures.py)
    assert_figures_agree(result.report, name)
    if name == "longer-samples":
        # AND the rank with the longer samples is told its inputs are bigger
        slow = next(f for f in result.report.findings if f.rule == "slow-rank")
        assert "its inputs are bigger" in slow.title, slow.title
    if scenario.verdict in ("healthy", "slow"):
        # AND a job that ends by itself trained on every rank, marked no fault and said it was done
        assert all(p.exists() for p in scenario.ready_markers(tmp_path)), got
        assert scenario.read_fault(tmp_path) is None, got
        log = (tmp_path / "job.log").read_text(errors="replace")
        assert log.count("done after") == scenario.nproc, log[-3000:]


@pytest.mark.timeout(200)
@pytest.mark.skipif(not EVERY, reason="replayed in the tier (*-learned); live with HANGDOC_LIVE_ZOO=1")
@pytest.mark.parametrize("name", ["compute-straggler", "uneven-shards"])
def test_a_hang_is_found_with_the_threshold_learned_from_the_steps(name, tmp_path):
    # GIVEN a job that steps healthily for a while, then hangs
    scenario = SCENARIOS[name]
    # WHEN it runs under `hangdoc run` with no --hang-after
    result = evaluate(scenario, tmp_path, hang_after=None, interval=1.0, timeout=150.0)
    # THEN the hang and its culprit are found, from a threshold learned from the steps it saw
    assert (result.verdict, result.culprits) == ("hang", tuple(scenario.culprit_ranks)), result.rules
    threshold = result.report.threshold
    assert threshold.source == "learned" and threshold.steps_seen >= 2, threshold
    assert result.seconds_to_verdict is not None and result.seconds_to_verdict < 40, result.seconds_to_verdict


@pytest.mark.timeout(200)
@pytest.mark.skipif(not EVERY, reason="replayed in the tier (slow-rank-at-10s); live with HANGDOC_LIVE_ZOO=1")
def test_a_slow_rank_is_not_a_hang_at_the_threshold_that_once_called_it_one(tmp_path):
    # GIVEN a healthy job where rank 1 computes ~4 s a step and rank 0 waits in the gradient all_reduce,
    # a tiny model and no DataLoader: a few bytes a step
    scenario = SCENARIOS["slow-rank"]
    # WHEN it runs under `hangdoc run --hang-after 10` (which once said "HANG: rank 1", exit 3)
    result = evaluate(scenario, tmp_path, hang_after=10.0, interval=2.0, timeout=150.0)
    # THEN the run finishes, never a hang: rank 0 steps every ~4 s, so nothing was quiet for 10 s
    # (6 samples after its first steps are too few to call it slow: healthy)
    assert result.verdict == "healthy", (result.rules, result.report.threshold)
