"""From a bundle to the report: diagnose, run every rule, lay out the ranks, read what every format
prints. Pure."""
from __future__ import annotations

import dataclasses

from hangdoc.base.words import rank_ranges
from hangdoc.analyze.clock import since_on_clock
from hangdoc.analyze.diagnose import Diagnosis, RankView, diagnose
from hangdoc.analyze.past import hang_after as past_hang_after
from hangdoc.analyze.shares import time_shares
from hangdoc.analyze.timeline import LiveTimelines, Timeline, timelines
from hangdoc.analyze.workers import workers_of_rank
from hangdoc.analyze.gpu import gpu_activity
from hangdoc.model import REPORT_SCHEMA, Bundle, Finding, RankGpu, RankReport, Report, Threshold, Verdict, Wait, WorkerReport, WorkerState
from hangdoc.rules import run_rules
from hangdoc.rules.base import Context
from hangdoc.report import facts
from hangdoc.report.lanes import lanes, restart_marks

NCCL_TIMEOUT_S = 600.0
GLOO_TIMEOUT_S = 1800.0


def assess(bundle: Bundle, hang_after: float | None = None, live: LiveTimelines | None = None,
           with_lanes: bool = True, lines: dict[int, Timeline] | None = None) -> tuple[Report, Diagnosis]:
    """The report and the diagnosis it came from (whose digest a save writes beside the samples).
    `live` or `lines`: the timelines a watch keeps from round to round. `with_lanes=False`: without
    the timeline lanes (a watch's round: they are drawn at its end)."""
    if lines is None:
        lines = live.of(bundle) if live is not None else timelines(bundle)
    diagnosis = diagnose(bundle, hang_after, lines)
    return report_of(bundle, diagnosis, lines, with_lanes), diagnosis


def with_lanes(report: Report, bundle: Bundle, diagnosis: Diagnosis, lines: dict[int, Timeline]) -> Report:
    """The report with its timeline lanes (what the HTML report and the trace draw)."""
    return dataclasses.replace(report, lanes=lanes(bundle, diagnosis, lines))


def report_of(bundle: Bundle, diagnosis: Diagnosis, lines: dict[int, Timeline] | None = None,
              with_lanes: bool = True) -> Report:
    """The report of a diagnosis: every rule run, the ranks laid out (a row per class when the
    views stand for classes)."""
    lines = lines if lines is not None else timelines(bundle)
    findings = run_rules(Context(bundle, diagnosis, lines))
    # The shares the diagnosis counted already (a node's digest), by the rank's pid.
    counted = {r.pid: r.shares for r in diagnosis.digest.ranks} if diagnosis.digest is not None else {}
    timeout = pg_timeout(bundle)
    remaining = None
    if diagnosis.verdict == Verdict.HANG and diagnosis.onset is not None and bundle.job.world_size:
        remaining = round(max(0.0, timeout - (diagnosis.decided_at - diagnosis.onset)), 1)
    report = Report(
        schema=REPORT_SCHEMA,
        verdict=diagnosis.verdict,
        detected_after_s=(round(diagnosis.decided_at - diagnosis.onset, 1)
                          if diagnosis.verdict in (Verdict.HANG, Verdict.CRASH) and diagnosis.onset is not None else None),
        culprit_ranks=diagnosis.culprits,
        findings=findings,
        ranks=tuple(dataclasses.replace(_rank_report(bundle, diagnosis, view),
                                        shares=time_shares(lines.get(view.info.pid), counted.get(view.info.node_pid)))
                    for view in diagnosis.ranks),
        pg_timeout_s=timeout,
        timeout_remaining_s=remaining,
        host=bundle.host.hostname,
        threshold=_threshold(diagnosis),
        samples=len(bundle.samples),
        flight=facts.flight(bundle),
        missing_stacks=facts.missing_stacks(bundle),
        slow=facts.slowness(diagnosis.slow),
    )
    tree, classes = facts.stacks(report, bundle)
    return dataclasses.replace(report, stack_tree=tree, stack_classes=classes, cause=facts.crash_cause(report, bundle),
                               before=facts.before_attach(bundle, diagnosis),
                               restarts=restart_marks(bundle),
                               lanes=lanes(bundle, diagnosis, lines) if with_lanes else ())


def report_without_ranks(verdict: Verdict, findings: tuple[Finding, ...]) -> Report:
    """A verdict reached before any rank was seen (a command that failed at start, a run out of time)."""
    return Report(schema=REPORT_SCHEMA, verdict=verdict, detected_after_s=None, culprit_ranks=(),
                  findings=findings, ranks=())


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
                         signal="loop" if beat.has_locals else "frames", witnesses=diagnosis.witnesses)
    # A hang's quiet counts from its onset, the one clock of the report (an older one, when the
    # job's own record dated the stall before the first sample).
    quiet_since = beat.stepped_since if beat.stepped_since is not None else beat.quiet_since
    if diagnosis.verdict == Verdict.HANG and diagnosis.onset is not None:
        quiet_since = min(quiet_since, diagnosis.onset)
    data = round(diagnosis.decided_at - beat.data_since, 1) if beat.data_since is not None else None
    return Threshold(source=beat.source, hang_after_s=beat.threshold_s, longest_step_s=beat.longest_step_s,
                     steps_seen=beat.steps_seen, quiet_s=round(diagnosis.decided_at - quiet_since, 1),
                     signal="loop" if beat.has_locals else "frames", witnesses=diagnosis.witnesses,
                     moving_s=data, moving=beat.moved_by if data is not None else None)


def pg_timeout(bundle: Bundle) -> float:
    """The default timeout of the job's backend. c10d names its threads, which tells it: NCCL's
    watchdog (pt_nccl_*) makes it NCCL, gloo's run loops (pt_gloo_*, gloo_*) alone gloo. Where no
    thread names were read (older bundles), a rank mapping libnccl means NCCL; but every process
    of a CUDA build of torch maps it, gloo jobs too."""
    names = {n for s in bundle.last.processes if s.proc is not None for n in s.proc.thread_names}
    if any(n.startswith("pt_nccl") for n in names):
        return NCCL_TIMEOUT_S
    if any(n.startswith(("pt_gloo", "gloo_")) for n in names):
        return GLOO_TIMEOUT_S
    nccl = any("libnccl" in lib for p in bundle.job.ranks for lib in p.libs)
    return NCCL_TIMEOUT_S if nccl else GLOO_TIMEOUT_S


def _rank_report(bundle: Bundle, diagnosis: Diagnosis, view: RankView) -> RankReport:
    fates = workers_of_rank(bundle, view.info.pid)   # live and dead workers are rows; retired ones a count
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
        group_rank=view.info.group_rank,
        rank_count=view.count,
        rank_set=rank_ranges(view.members) if len(view.members) > 1 else None,
        gpu_trend=facts.gpu_trend(bundle, view.info.pid),
    )
