"""cpu-quota-throttled: the job's cgroup CPU quota throttles it while its ranks wait for data."""
from __future__ import annotations

from hangdoc.base.words import plural
from hangdoc.model import Finding, Severity, Verdict
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import MIN_SAMPLES, STARVED_SHARE, data_shares, live_workers

MIN_PERIODS = 10          # scheduler periods (100 ms each by default) the window must span
THROTTLED_SHARE = 0.25    # the share of periods in which the quota ran out


def check(ctx: Context) -> list[Finding]:
    if ctx.diagnosis.verdict not in (Verdict.HEALTHY, Verdict.SLOW):
        return []
    readings = [(s.time, s.cpu_quota) for s in ctx.bundle.samples if s.cpu_quota is not None]
    if len(readings) < 2:
        return []
    (t0, first), (t1, last) = readings[0], readings[-1]
    periods, throttled = last.periods - first.periods, last.throttled_periods - first.throttled_periods
    if first.cgroup != last.cgroup or periods < MIN_PERIODS or t1 <= t0 or throttled / periods < THROTTLED_SHARE:
        return []
    waiting = [(rank, w, a) for rank, w, a in data_shares(ctx) if a >= MIN_SAMPLES and w / a >= STARVED_SHARE]
    if not waiting:
        return []
    share, per_s = throttled / periods, (last.throttled_s - first.throttled_s) / (t1 - t0)
    ranks = ctx.bundle.job.ranks
    workers = sum(len(live_workers(ctx, r.pid)) for r in ranks)
    evidence = [f"cgroup {last.cgroup}: a CPU quota of {last.cores:g} CPUs; throttled in {throttled} of {periods} "
                f"periods ({share:.0%}), {per_s:.2f} s of throttling a second over {t1 - t0:.0f} s (cpu.stat)"]
    evidence += [f"rank {rank}: waiting in DataLoader.__next__ in {w} of {a} samples ({100 * w / a:.0f}%)"
                 for rank, w, a in waiting]
    evidence.append(f"{plural(len(ranks), 'rank')} and {plural(workers, 'DataLoader worker')} share the quota's "
                    f"{last.cores:g} CPUs (the node has {ctx.bundle.host.cpu_count})")
    return [finding(
        RULE, [rank for rank, _, _ in waiting],
        f"The job's CPU quota ({last.cores:g} CPUs) throttles it in {share:.0%} of periods while its ranks "
        f"wait for data",
        evidence, RULE.fix, cause=f"a CPU quota of {last.cores:g} CPUs, throttled in {share:.0%} of periods",
    )]


RULE = Rule(
    slug="cpu-quota-throttled",
    title="A cgroup CPU quota throttles a data-bound job",
    severity=Severity.WARNING,
    check=check,
    summary="Fires on a job that moves (healthy or slow) when the tightest CPU quota over the first rank's "
            "cgroup and its parents (cgroup v2 cpu.max, v1 cpu.cfs_quota_us) ran out in at least a quarter of "
            "at least 10 scheduler periods between the first and the last sample (cpu.stat, read every "
            "sample), while a rank waits on its DataLoader in at least half its samples.",
    fix="Raise the quota (docker run --cpus=N, Kubernetes resources.limits.cpu, Slurm --cpus-per-task) to "
        "ranks x (1 + num_workers) CPUs, or lower num_workers to what the quota holds: workers beyond it "
        "only take turns.",
)
