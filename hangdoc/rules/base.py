"""What a live rule reads: the bundle, its analysis, and the findings of the rules before it.

The Context is the rules' one door to analyze/: a rule reads the diagnosis, the timelines, the facts
`analyse` worked out (`worked`) and the analysis' readings of one frame, sample or timeline through
it, and imports no analyze/ helper of its own (tests/unit/test_rules_read_the_analysis.py).

The record (`Rule`) and the one finding builder (`finding`) live on the model floor, shared with
`check` and `run`; they are re-exported here, where the rules have always taken them from."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from hangdoc.analyze.classify import is_gpu_sync, parked_in
from hangdoc.analyze.clock import off_cpu_since, since_on_clock
from hangdoc.analyze.diagnose import Diagnosis, RankView
from hangdoc.analyze.jobfacts import backend
from hangdoc.analyze.passes import FileReads, file_reads
from hangdoc.analyze.rendezvous import setup_name
from hangdoc.analyze.shares import is_step_wait, rank_shares, time_shares, total, window
from hangdoc.analyze.timeline import Point, Timeline, timelines
from hangdoc.analyze.worked import WorkedOut, work_out
from hangdoc.model import (Bundle, Cause, Finding, Frame, ProcessInfo, ProcSample, RankState, Role, Rule, ShareCounts,
                           SlowKind, TimeShares, Verdict, WorkerState, finding)

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
        return list(self.diagnosis.culprit_views)

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

    def rereads(self, pid: int) -> list[FileReads]:
        """The files the process reads one lap of again and again, by its bytes (`analyze/passes.py`):
        a rewind for ever."""
        line = self.timelines.get(pid)
        return [read for read in file_reads(line)[0].values() if read.looping] if line is not None else []

    def workers_of(self, rank_pid: int) -> list[ProcessInfo]:
        return [p for p in self.bundle.job.children_of(rank_pid) if p.role is Role.WORKER]

    # The analysis' clock and readings, for the evidence lines.

    def on_clock(self, since: float) -> float:
        """`since` on the report's one clock (analyze/clock.py): the onset, where the state was held
        from the first sample and the past dates the stall earlier."""
        first = self.bundle.samples[0].time if self.bundle.samples else since
        return since_on_clock(since, self.diagnosis.onset, first)

    def blocked_for(self, pid: int) -> float | None:
        """How long a worker has been blocked in its system call: from when hangdoc saw it enter the
        call, or, blocked since its first sample, from when the kernel last ran it before that."""
        line = self.timelines.get(pid)
        if line is None or line.last.reading.state != WorkerState.BLOCKED:
            return None
        return self.diagnosis.decided_at - off_cpu_since(line.points, line.state_since())

    @staticmethod
    def is_gpu_sync(detail: object) -> bool:
        """A reading's detail that names a wait on the rank's own GPU stream."""
        return is_gpu_sync(detail)

    @staticmethod
    def parked_in(sample: ProcSample | None) -> str | None:
        """What a main thread sleeps in between two tries of a poll or retry loop, in words."""
        return parked_in(sample)

    @staticmethod
    def setup_call(frame: Frame) -> str:
        """"init_process_group", "new_group", "TCPStore": the setup call a frame stands in."""
        return setup_name(frame)

    @staticmethod
    def is_step_wait(detail: object) -> bool:
        """A wait in the step's own collectives, or at a sync NCCL hides them behind."""
        return is_step_wait(detail)

    @staticmethod
    def window(line: Timeline) -> list[Point]:
        """The rank's points over its window: the stretch its shares are counted over (analyze/shares.py)."""
        return window(line)

    @staticmethod
    def counted(line: Timeline) -> ShareCounts:
        """Where the rank was found over its window, counted (both halves together)."""
        return total(rank_shares(line))
