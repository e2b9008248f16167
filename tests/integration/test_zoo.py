"""Every scenario of the zoo under `hangdoc run`: the verdict, the culprits and the rule."""
from __future__ import annotations

import pytest

from hangdoc.scenarios import SCENARIOS
from hangdoc.scenarios.evaluate import evaluate

pytestmark = [pytest.mark.integration]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_is_diagnosed_as_its_ground_truth(name, tmp_path):
    # GIVEN a real torchrun job reproducing one field failure (or a healthy one)
    scenario = SCENARIOS[name]
    # WHEN it runs under `hangdoc run` with a short threshold
    result = evaluate(scenario, tmp_path, hang_after=6.0, interval=0.5, timeout=150.0)
    # THEN the verdict, the culprit ranks and the expected rule match the ground truth
    got = (result.verdict, result.culprits, result.rules)
    assert result.verdict == scenario.verdict, got
    assert result.culprits == tuple(scenario.culprit_ranks), got
    if scenario.expected_rule:
        assert scenario.expected_rule in result.rules, got
    if scenario.verdict == "healthy":
        assert not any(f.severity.value == "critical" for f in result.report.findings), got
