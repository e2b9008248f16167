"""cpu-quota-throttled: the job's cgroup CPU quota throttles it while its ranks wait for data.

On a job that moves it says why the ranks wait. On a hang whose culprit waits on its DataLoader
while its workers run, throttled, it names the quota as what holds the workers: a throttled
worker is not a stalled one, and dataloader-stall stands back for those ranks (`Cause.WORKERS`)."""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.analyze.timeline import CPU_NOISE_S
from hangdoc.base.words import plural
from hangdoc.model import Cause, CpuQuota, Finding, Severity, Verdict
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import MIN_SAMPLES, STARVED_SHARE, data_shares, live_workers, rank_line, worker_name

MIN_PERIODS = 10          # scheduler periods (100 ms each by default) the window must span
THROTTLED_SHARE = 0.25    # the share of periods in which the quota ran out
WORKERS_SHARE = 0.5       # on a hang: the workers used at least this share of the quota over the stall


@dataclass(frozen=True)
class _Throttling:
    """The quota's cpu.stat counters between two samples."""

    first: CpuQuota
    last: CpuQuota
    span_s: float

    @property
    def periods(self) -> int:
        return self.last.periods - self.first.periods

    @property
    def throttled(self) -> int:
        return self.last.throttled_periods - self.first.throttled_periods

    @property
    def share(self) -> float:
        return self.throttled / self.periods

    def line(self, over: str) -> str:
        per_s = (self.last.throttled_s - self.first.throttled_s) / self.span_s
        return (f"cgroup {self.last.cgroup}: a CPU quota of {self.last.cores:g} CPUs; throttled in {self.throttled} "
                f"of {self.periods} periods ({self.share:.0%}), {per_s:.2f} s of throttling a second {over} (cpu.stat)")


def _throttling(ctx: Context, since: float | None = None) -> _Throttling | None:
    """The throttling from the first sample at or after `since` to the last, where the quota ran out
    in at least THROTTLED_SHARE of at least MIN_PERIODS periods; None otherwise."""
    readings = [(s.time, s.cpu_quota) for s in ctx.bundle.samples
                if s.cpu_quota is not None and (since is None or s.time >= since)]
    if len(readings) < 2:
        return None
    (t0, first), (t1, last) = readings[0], readings[-1]
    window = _Throttling(first, last, t1 - t0)
    if first.cgroup != last.cgroup or window.periods < MIN_PERIODS or t1 <= t0 or window.share < THROTTLED_SHARE:
        return None
    return window


def check(ctx: Context) -> list[Finding]:
    if ctx.diagnosis.verdict == Verdict.HANG:
        return _on_a_hang(ctx)
    if ctx.diagnosis.verdict not in (Verdict.HEALTHY, Verdict.SLOW):
        return []
    window = _throttling(ctx)
    if window is None:
        return []
    waiting = [(rank, w, a) for rank, w, a in data_shares(ctx) if a >= MIN_SAMPLES and w / a >= STARVED_SHARE]
    if not waiting:
        return []
    cores = window.last.cores
    evidence = [window.line(f"over {window.span_s:.0f} s")]
    evidence += [f"rank {rank}: waiting in DataLoader.__next__ in {w} of {a} samples ({100 * w / a:.0f}%)"
                 for rank, w, a in waiting]
    evidence.append(_sharing(ctx, cores))
    return [finding(
        RULE, [rank for rank, _, _ in waiting],
        f"The job's CPU quota ({cores:g} CPUs) throttles it in {window.share:.0%} of periods while its ranks "
        f"wait for data",
        evidence, RULE.fix, cause=f"a CPU quota of {cores:g} CPUs, throttled in {window.share:.0%} of periods",
    )]


def _sharing(ctx: Context, cores: float) -> str:
    ranks = ctx.bundle.job.ranks
    workers = sum(len(live_workers(ctx, r.pid)) for r in ranks)
    return (f"{plural(len(ranks), 'rank')} and {plural(workers, 'DataLoader worker')} share the quota's "
            f"{cores:g} CPUs (the node has {ctx.bundle.host.cpu_count})")


def _cpu_since(ctx: Context, pid: int, since: float | None) -> tuple[float, float] | None:
    """(CPU seconds, wall seconds) of a process from its first point at or after `since` to its last."""
    line = ctx.timelines.get(pid)
    points = [p for p in (line.points if line else ()) if p.cpu_s is not None and (since is None or p.time >= since)]
    if len(points) < 2 or points[-1].time <= points[0].time:
        return None
    return points[-1].cpu_s - points[0].cpu_s, points[-1].time - points[0].time


def _on_a_hang(ctx: Context) -> list[Finding]:
    """The culprits wait on their DataLoader while the quota runs out over the stall and their workers
    use CPU through it, together at least half the quota: the workers run, at the quota's pace."""
    views = ctx.starved_culprits()
    if not views:
        return []
    d = ctx.diagnosis
    window = _throttling(ctx, d.onset)
    if window is None:
        return []
    cores = window.last.cores
    # Each culprit's live workers' CPU over the stall: a worker that used none is stalled, not throttled.
    used = {view.info.rank: [(w, cpu) for w, _, alive in view.workers
                             if alive and (cpu := _cpu_since(ctx, w.pid, d.onset)) is not None] for view in views}
    running = [v for v in views if any(cpu > CPU_NOISE_S for _, (cpu, _) in used[v.info.rank])]
    spent = sum(cpu[0] for r in ctx.bundle.job.ranks for w in live_workers(ctx, r.pid)
                if (cpu := _cpu_since(ctx, w.pid, d.onset)) is not None)
    if not running or spent < WORKERS_SHARE * cores * window.span_s:
        return []
    ranks = [v.info.rank for v in running]
    who = f"Rank {ranks[0]} waits" if len(ranks) == 1 else f"Ranks {', '.join(map(str, ranks))} wait"
    evidence = [window.line(f"over the {window.span_s:.0f} s watched since the last step")]
    for view in running:
        evidence.append(rank_line(ctx, view))
        evidence += [f"{worker_name(w)}: {cpu:.2f} s of CPU in {span:.1f} s ({cpu / span:.2f} CPUs): running, "
                     "throttled by the quota, not stalled" for w, (cpu, span) in used[view.info.rank]]
    evidence.append(_sharing(ctx, cores) + f"; the workers used {spent / window.span_s:.2f} of them over the stall")
    fix = RULE.fix
    if d.rhythm is not None and d.rhythm.source == "given":
        fix += (f" Under this quota one step can outlast the --hang-after of {d.rhythm.threshold_s:g} s while every "
                "worker runs: a hang by that bound; give a longer one (or none: hangdoc learns the step) to watch "
                "it as a job that moves.")
    return [finding(
        RULE, ranks,
        f"{who} on its DataLoader while the job's CPU quota ({cores:g} CPUs) throttles its workers in "
        f"{window.share:.0%} of periods: they run, at the quota's pace",
        evidence, fix, Severity.CRITICAL,
        cause=f"a CPU quota of {cores:g} CPUs, throttled in {window.share:.0%} of periods",
    )]


RULE = Rule(
    slug="cpu-quota-throttled",
    title="A cgroup CPU quota throttles a data-bound job",
    severity=Severity.WARNING,
    check=check,
    summary="Fires when the tightest CPU quota over the first rank's cgroup and its parents (cgroup v2 "
            "cpu.max, v1 cpu.cfs_quota_us) ran out in at least a quarter of at least 10 scheduler periods "
            "(cpu.stat, read every sample). On a job that moves (healthy or slow), between the first and the "
            "last sample, while a rank waits on its DataLoader in at least half its samples. On a hang (a "
            "critical), over the stall, while the culprit waits on its DataLoader and its workers run through "
            "it, together using at least half the quota: the quota holds the workers, and dataloader-stall "
            "stands back for those ranks.",
    fix="Raise the quota (docker run --cpus=N, Kubernetes resources.limits.cpu, Slurm --cpus-per-task) to "
        "ranks x (1 + num_workers) CPUs, or lower num_workers to what the quota holds: workers beyond it "
        "only take turns.",
    causes=frozenset({Cause.WORKERS}),
)
