"""What a live rule reads: the bundle, its analysis, and the findings of the rules before it.

The record (`Rule`) and the one finding builder (`finding`) live on the model floor, shared with
`check` and `run`; they are re-exported here, where the rules have always taken them from."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from hangdoc.analyze.diagnose import Diagnosis, RankView
from hangdoc.analyze.jobfacts import backend
from hangdoc.analyze.shares import time_shares
from hangdoc.analyze.timeline import Timeline, timelines
from hangdoc.analyze.worked import WorkedOut, work_out
from hangdoc.model import Bundle, Cause, Finding, ProcessInfo, RankState, Role, Rule, SlowKind, TimeShares, Verdict, finding

__all__ = ["Context", "Rule", "finding"]


@dataclass(frozen=True)
class Context:
    """Everything a rule may read: the bundle and what the analysis derived from it."""

    bundle: Bundle
    diagnosis: Diagnosis
    lines: dict[int, Timeline] | None = None    # the bundle's timelines, when already built
    findings: tuple[Finding, ...] = ()          # what the rules before this one found (run_rules' order)
    before: tuple[Rule, ...] = ()               # the rules before this one, whose findings those are
    facts: WorkedOut | None = None              # what the analysis worked out for the rules, when handed

    @cached_property
    def worked(self) -> WorkedOut:
        """The job-wide facts the analysis worked out (worked out here only for a context made by hand)."""
        return self.facts if self.facts is not None else work_out(self.bundle, self.timelines)

    @cached_property
    def backend(self) -> str | None:
        """The job's process-group backend ("nccl", "gloo"; None: not read): a fix names its own."""
        return backend(self.bundle)

    @cached_property
    def timelines(self) -> dict[int, Timeline]:
        return self.lines if self.lines is not None else timelines(self.bundle)

    def explained(self, cause: Cause) -> dict[int, str]:
        """rank -> the slug of the first finding before this rule, by a rule that names `cause`,
        that names the rank: where a later, more general rule stands back."""
        naming = {r.slug for r in self.before if cause in r.causes}
        ranks: dict[int, str] = {}
        for found in self.findings:
            if found.rule in naming:
                for rank in found.ranks:
                    ranks.setdefault(rank, found.rule)
        return ranks

    def culprit_views(self) -> list[RankView]:
        culprits = set(self.diagnosis.culprits)
        return [v for v in self.diagnosis.ranks if culprits.intersection(v.ranks)]

    def starved_culprits(self) -> list[RankView]:
        """The culprits of a hang that wait on their DataLoader: where the stall rules look."""
        if self.diagnosis.verdict != Verdict.HANG:
            return []
        return [v for v in self.culprit_views() if v.reading.state == RankState.DATALOADER]

    def data_stragglers(self) -> list[RankView]:
        """The stragglers of a slow job that mostly wait on their DataLoader: the job still moves,
        so their workers deliver, late; what makes each sample slow is for the data rules to say."""
        slow = self.diagnosis.slow
        if self.diagnosis.verdict != Verdict.SLOW or slow is None or slow.kind != SlowKind.STRAGGLER:
            return []
        if slow.doing != RankState.DATALOADER:
            return []
        return [v for v in self.diagnosis.ranks if set(slow.stragglers).intersection(v.ranks)]

    def long_batch(self) -> list[RankView]:
        """The ranks of a slow job that have waited on one batch longer than the hang threshold while
        their workers' data moves on (`analyze/slow.py: long_batch`): what reads it is for the data rules."""
        slow = self.diagnosis.slow
        if self.diagnosis.verdict != Verdict.SLOW or slow is None or slow.waited_s is None:
            return []
        return [v for v in self.diagnosis.ranks if set(slow.stragglers).intersection(v.ranks)]

    @cached_property
    def _counted(self) -> dict:
        """The shares the diagnosis counted already, by the rank's node pid."""
        digest = self.diagnosis.digest
        return {r.pid: r for r in digest.ranks} if digest is not None else {}

    def shares(self, view: RankView) -> TimeShares | None:
        """Where the rank's time went over its window (the counts the diagnosis made, when it made them)."""
        counted = self._counted.get(view.info.node_pid)
        if counted is None:
            return time_shares(self.timelines.get(view.info.pid))
        return time_shares(self.timelines.get(view.info.pid), counted.shares, counted.runqueue)

    def workers_of(self, rank_pid: int) -> list[ProcessInfo]:
        return [p for p in self.bundle.job.children_of(rank_pid) if p.role is Role.WORKER]
