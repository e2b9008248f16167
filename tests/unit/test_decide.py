"""The verdict decided over ranks' digests: the rules of hang, suspect and healthy, one at a time."""
from __future__ import annotations

import pytest

from hangdoc.analyze.diagnose import JobFacts, decide
from hangdoc.model import RankDigest, StepSummary

T0 = 1_700_000_000.0


def rank(n: int, state: str, detail: str | None, last_step: float, longest: float = 2.7) -> RankDigest:
    return RankDigest(rank=n, pid=100 + n, host="vm", group_rank=0, state=state, detail=detail, top_frame=None,
                      stack_key=state, state_since=T0, blocked_since=None, exited_at=None, progress="slow",
                      rhythm=StepSummary(8, longest, last_step, True), unmoved_since=None, points=10)


@pytest.mark.parametrize("quiet, verdict", [(2.2, "healthy"), (3.0, "suspect"), (4.1, "hang")])
def test_a_split_job_is_suspect_only_when_quieter_than_its_slowest_step(quiet, verdict):
    # GIVEN rank 0 waiting in all_reduce for rank 1, steps of up to 2.7 s, --hang-after 4
    now = T0 + 20
    ranks = [rank(0, "collective-wait", "all_reduce", now - quiet), rank(1, "compute", None, now - quiet)]
    # WHEN decided `quiet` seconds after the last step
    decision = decide(ranks, JobFacts(first=T0, now=now, logs=(), exit_code=None, hang_after=4.0))
    # THEN a wait shorter than the slowest step seen is the job's rhythm, not a suspicion
    assert decision.verdict == verdict
    assert decision.culprits == (() if verdict == "healthy" else (1,))
