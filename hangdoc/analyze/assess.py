"""The analysis, through one entry: `analyse(bundle)` reads the evidence once and returns an
`Analysis`, the diagnosis and every fact the report lays out beside the findings (the rows of the
ranks, the stacks, the lanes, a crash's story), so that report/ only assembles. Pure."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hangdoc.analyze import facts
from hangdoc.analyze.clock import since_on_clock
from hangdoc.analyze.diagnose import Diagnosis, RankView, diagnose
from hangdoc.model.gpu import gpu_activity
from hangdoc.analyze.jobfacts import GLOO_TIMEOUT_S, NCCL_TIMEOUT_S, backend, pg_timeout
from hangdoc.analyze.lanes import lanes, restart_marks
from hangdoc.analyze.past import hang_after as past_hang_after
from hangdoc.analyze.shares import time_shares
from hangdoc.analyze.timeline import LiveTimelines, Timeline, timelines
from hangdoc.analyze.worked import WorkedOut, work_out
from hangdoc.analyze.workers import workers_of_rank
from hangdoc.model import (
    BeforeAttach, Bundle, FlightSummary, Lane, RankGpu, RankReport, RestartMark, Slowness, StackClass, Threshold, TimeShares,
    PID_STRIDE, Verdict, Wait, WorkerReport, WorkerState,
)
from hangdoc.model.report import class_members

__all__ = ["GLOO_TIMEOUT_S", "NCCL_TIMEOUT_S", "Analysis", "Diagnosis", "LiveTimelines", "Timeline", "analyse",
           "pg_timeout"]

@dataclass(frozen=True)
class Analysis:
    """What the analysis read from one bundle, for the report to lay out: the diagnosis, the
    timelines the rules read, and every fact a format prints beside the findings."""

    evidence: Bundle                  # what was analysed (the rules read it too)
    diagnosis: Diagnosis
    lines: dict[int, Timeline]
    ranks: tuple[RankReport, ...]     # a row per rank view (per class, when the views stand for classes)
    host: str
    samples: int
    pg_timeout_s: float
    timeout_remaining_s: float | None
    backend: str | None               # "nccl", "gloo"; None: nothing of the ranks was read
    threshold: Threshold | None
    flight: FlightSummary | None
    missing_stacks: tuple[str, ...]
    slow: Slowness | None
    stack_tree: tuple[str, ...]
    stack_classes: tuple[StackClass, ...]
    crash_story: tuple[str, ...]      # a crash's own story, which the report prints where no rule names the cause
    before: BeforeAttach | None
    restarts: tuple[RestartMark, ...]
    worked: WorkedOut | None = None   # the job-wide facts the rules read (restarts, fates, flights), worked out once
    lanes: tuple[Lane, ...] = ()      # drawn only when asked (a watch's rounds go without)

    def with_lanes(self) -> Analysis:
        """The analysis with its timeline lanes (what the HTML report and the trace draw)."""
        return dataclasses.replace(self, lanes=lanes(self.evidence, self.diagnosis, self.lines))


def analyse(bundle: Bundle, hang_after: float | None = None, *, live: LiveTimelines | None = None,
            diagnosis: Diagnosis | None = None, with_lanes: bool = True) -> Analysis:
    """The analysis of `bundle`. `live`: the timelines a watch keeps from round to round.
    `diagnosis`: one made already (a job of thousands of nodes, diagnosed by class from their
    digests). `with_lanes=False`: without the timeline lanes (a watch's round: they are drawn at
    its end)."""
    if diagnosis is not None:
        lines = timelines(bundle)
    else:
        lines = live.of(bundle) if live is not None else timelines(bundle)
        diagnosis = diagnose(bundle, hang_after, lines)
    # The shares the diagnosis counted already (a node's digest), by the rank's pid.
    counted = {r.pid: r for r in diagnosis.digest.ranks} if diagnosis.digest is not None else {}
    timeout = pg_timeout(bundle)
    remaining = None
    if diagnosis.verdict == Verdict.HANG and diagnosis.onset is not None and bundle.job.world_size:
        remaining = round(max(0.0, timeout - (diagnosis.decided_at - diagnosis.onset)), 1)
    ranks = tuple(dataclasses.replace(_rank_report(bundle, diagnosis, view, lines),
                                      shares=_shares(lines.get(view.info.pid), counted.get(view.info.node_pid)))
                  for view in diagnosis.ranks)
    tree, classes = facts.stacks(bundle, class_members(ranks))
    analysis = Analysis(
        evidence=bundle, diagnosis=diagnosis, lines=lines, ranks=ranks,
        host=bundle.host.hostname, samples=len(bundle.samples),
        pg_timeout_s=timeout, timeout_remaining_s=remaining, backend=backend(bundle), threshold=_threshold(diagnosis),
        flight=facts.flight(bundle), missing_stacks=facts.missing_stacks(bundle),
        slow=facts.slowness(diagnosis.slow, bundle, lines),
        stack_tree=tree, stack_classes=classes,
        crash_story=facts.crash_story(bundle, diagnosis.culprits) if diagnosis.verdict == Verdict.CRASH else (),
        before=facts.before_attach(bundle, diagnosis), restarts=restart_marks(bundle),
        worked=work_out(bundle, lines),
    )
    return analysis.with_lanes() if with_lanes else analysis


def _top_frame(view: RankView) -> str | None:
    """The rank's frame as the table shows it; a rank stopped by a signal says so first (its state
    is idle, and a table reading 'idle' alone hides that someone stopped it)."""
    frame = view.reading.frame.label if view.reading.frame else None
    if view.reading.detail == Wait.STOPPED:
        return "stopped (SIGSTOP)" + (f" at {frame}" if frame else "")
    return frame


def _threshold(diagnosis: Diagnosis) -> Threshold | None:
    beat = diagnosis.rhythm
    if beat is None:
        return None
    if diagnosis.from_past:
        asleep = diagnosis.before is not None and diagnosis.before.others_asleep
        return Threshold(source="past", hang_after_s=past_hang_after(beat.source, beat.threshold_s, asleep),
                         longest_step_s=beat.longest_step_s, steps_seen=beat.steps_seen,
                         quiet_s=round(diagnosis.decided_at - diagnosis.onset, 1),
                         signal="loop" if beat.has_locals else "frames", witnesses=diagnosis.witnesses,
                         proof=diagnosis.proof.said if diagnosis.proof is not None else None)
    # A hang's quiet counts from its onset, the one clock of the report (an older one, when the
    # job's own record dated the stall before the first sample).
    quiet_since = beat.stepped_since if beat.stepped_since is not None else beat.quiet_since
    if diagnosis.verdict == Verdict.HANG and diagnosis.onset is not None:
        quiet_since = min(quiet_since, diagnosis.onset)
    data = round(diagnosis.decided_at - beat.data_since, 1) if beat.data_since is not None else None
    return Threshold(source=beat.source, hang_after_s=beat.threshold_s, longest_step_s=beat.longest_step_s,
                     steps_seen=beat.steps_seen, quiet_s=round(diagnosis.decided_at - quiet_since, 1),
                     signal="loop" if beat.has_locals else "frames", witnesses=diagnosis.witnesses,
                     moving_s=data, moving=beat.moved_by if data is not None else None, start=beat.start,
                     proof=diagnosis.proof.said if diagnosis.proof is not None else None)


def _shares(line: Timeline | None, counted) -> TimeShares | None:
    """The rank's time shares: from the digest's counts where the diagnosis made them, else its timeline."""
    if counted is None:
        return time_shares(line)
    return time_shares(line, counted.shares, counted.runqueue)


def _rank_report(bundle: Bundle, diagnosis: Diagnosis, view: RankView, lines: dict[int, Timeline]) -> RankReport:
    # Live and dead workers are rows; retired ones a count. Over the analysis's own timelines: a
    # watch keeps them round to round, and building them again would read its whole history.
    fates = workers_of_rank(bundle, view.info.pid, lines)
    device = bundle.last.gpu.device_of(view.info.pid) if bundle.last.gpu.available else None
    gpu = None
    if device is not None:
        gpu = RankGpu(device.index, device.utilization_pct, device.power_w, device.sm_clock_mhz,
                      device.memory_used_bytes, gpu_activity(device))
    return RankReport(
        rank=view.info.rank,
        pid=view.info.node_pid,
        host=view.info.host or bundle.host.hostname,
        state=view.reading.state,
        waiting_s=round(diagnosis.decided_at - since_on_clock(view.state_since, diagnosis.onset, bundle.samples[0].time), 1),
        progress=view.progress,
        gpu=gpu,
        top_frame=_top_frame(view),
        workers=tuple(
            WorkerReport(pid=w.node_pid, index=w.worker_index, state=r.state if alive else WorkerState.EXITED,
                         top_frame=r.frame.label if r.frame else None, alive=alive)
            for w, r, alive in view.workers if w.pid in fates.shown
        ),
        retired_workers=len(fates.retired),
        rank_source=view.info.rank_source if not (view.info.rank_source or "env ").startswith("env ") else None,
        wrappers=tuple(dataclasses.replace(w, pid=w.pid % PID_STRIDE) for w in view.info.wrappers),
        group_rank=view.info.group_rank,
        rank_count=view.count,
        rank_set=view.rank_set,
        gpu_trend=facts.gpu_trend(bundle, view.info.pid),
    )
