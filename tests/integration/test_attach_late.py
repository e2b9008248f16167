"""Attaching to a job that was already hung (or is healthy) when hangdoc arrived: real torchrun jobs
of the zoo, watched with no flag some seconds after their fault, as users do."""
from __future__ import annotations

import pytest

from hangdoc.scenarios import SCENARIOS
from hangdoc.scenarios.late import attach_late

pytestmark = [pytest.mark.integration]


@pytest.mark.timeout(240)
def test_a_job_hung_for_a_while_is_named_within_seconds_of_attaching():
    # GIVEN rank 1's DataLoader workers deadlocked 20 s ago, rank 0 asleep in the gradient all_reduce
    # WHEN hangdoc watch attaches, with no flag
    result = attach_late(SCENARIOS["worker-deadlock"], delay_s=20.0, timeout_s=90.0)
    assert result.why is None, result.why
    # THEN it names the hang of rank 1 and its cause within 15 s, from what the kernel knew of the past
    assert (result.verdict, result.culprits) == ("hang", (1,)), result.report
    assert "worker-deadlock" in result.rules
    assert result.decided_from_past and result.attach_to_verdict_s <= 15.0, result.attach_to_verdict_s
    # and the onset is the wait's start, given as a lower bound: at least the 20 s it had waited
    assert result.waited_before_s is not None and result.waited_before_s >= 15.0
    assert result.report.detected_after_s >= result.waited_before_s


@pytest.mark.timeout(240)
def test_a_long_wait_for_a_rank_that_works_is_not_a_hang():
    # GIVEN rank 0 validating for ~8 s every 15 steps while rank 1 waits for it in a barrier
    # WHEN hangdoc attaches in the middle of the job and watches it for 30 s
    result = attach_late(SCENARIOS["validation-pause"], delay_s=6.0, timeout_s=30.0)
    assert result.why is None, result.why
    # THEN no hang: the evidence of a long wait is not a hang while the lone rank works and moves on
    assert result.verdict == "healthy", result.report
    assert not result.decided_from_past
