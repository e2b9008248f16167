"""threads-oversubscribed: the ranks' compute threads (OMP_NUM_THREADS / MKL_NUM_THREADS per rank)
far outnumber the CPUs the ranks may use, and the ranks wait on the run queue for a CPU."""
from __future__ import annotations

from hangdoc.base.parse import to_int
from hangdoc.base.words import plural, rank_ranges
from hangdoc.model import Finding, Severity, Verdict
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.samples import samples_of

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
OVER = 2.0              # compute threads per CPU from which the ranks fight over the cores
RUNQUEUE_SHARE = 0.2    # a main thread runnable but not running this share of the time starves
MIN_SPAN_S = 3.0


def threads_of(rank) -> tuple[str, int] | None:
    """(variable, threads) the rank's environment sets for its intra-op pool; None where unset."""
    set_ = [(k, n) for k in THREAD_ENV if (n := to_int(rank.env.get(k))) is not None and n > 0]
    return max(set_, key=lambda kv: kv[1]) if set_ else None


def starved(ctx: Context, pid: int) -> tuple[float, float, float, int] | None:
    """(run-queue share, CPU-seconds a second, seconds, threads) of a rank's main thread over the samples."""
    seen = [(t, s.proc) for t, s in samples_of(ctx.bundle, pid)
            if s.alive and s.proc is not None and s.proc.main_thread is not None
            and s.proc.main_thread.runqueue_s is not None]
    if len(seen) < 2 or seen[-1][0] - seen[0][0] < MIN_SPAN_S:
        return None
    (t0, first), (t1, last) = seen[0], seen[-1]
    span = t1 - t0
    return ((last.main_thread.runqueue_s - first.main_thread.runqueue_s) / span,
            (last.cpu_s - first.cpu_s) / span, span, last.num_threads)


def cpus_of(ctx: Context, ranks) -> int:
    """The CPUs the ranks may use together (their Cpus_allowed_list), else the host's count."""
    cpus: set[int] = set()
    for rank in ranks:
        last = next((s.proc for _, s in reversed(samples_of(ctx.bundle, rank.pid)) if s.proc is not None), None)
        if last is not None and last.allowed_cpus:
            cpus |= last.allowed_cpus
    return len(cpus) or ctx.bundle.host.cpu_count


def check(ctx: Context) -> list[Finding]:
    if ctx.diagnosis.verdict not in (Verdict.HEALTHY, Verdict.SLOW):
        return []
    ranks = [r for r in ctx.bundle.job.ranks if threads_of(r) is not None]
    if not ranks or len(ranks) < len(ctx.bundle.job.ranks):
        return []
    settings = {r.pid: threads_of(r) for r in ranks}
    total, cpus = sum(n for _, n in settings.values()), cpus_of(ctx, ranks)
    readings = {r.rank: starved(ctx, r.pid) for r in ranks}
    if total < OVER * cpus or None in readings.values():
        return []
    share = sum(r[0] for r in readings.values()) / len(readings)
    if share < RUNQUEUE_SHARE:
        return []
    names = sorted({f"{k}={n}" for k, n in settings.values()})
    evidence = [f"{plural(len(ranks), 'rank')} run with {', '.join(names)}: {total} intra-op threads set for the "
                f"{plural(cpus, 'CPU')} the ranks may use ({total / cpus:.1f} per CPU)"]
    for rank, (queued, used, span, threads) in sorted(readings.items()):
        evidence.append(f"rank {rank}: {plural(threads, 'thread')}; its main thread waited for a CPU "
                        f"{queued:.2f} s of every second over {span:.0f} s (run queue, schedstat) and ran "
                        f"{used:.2f} CPU-seconds a second in all its threads")
    per_rank = max(cpus // len(ctx.bundle.job.ranks), 1)
    evidence.append(f"{cpus} CPUs over {plural(len(ctx.bundle.job.ranks), 'rank')} on this node: "
                    f"{per_rank} each")
    return [finding(
        RULE, sorted(readings),
        f"The ranks' threads oversubscribe the CPUs: {total} intra-op threads set for {cpus}; "
        f"the main threads wait for a CPU {share:.0%} of the time",
        evidence, f"Set OMP_NUM_THREADS (and MKL_NUM_THREADS) to the CPUs per rank, {per_rank} here "
                  f"(torchrun's default is 1), or call torch.set_num_threads({per_rank}) in each rank; "
                  f"DataLoader workers already run one thread each.",
    )]


RULE = Rule(
    slug="threads-oversubscribed",
    title="The ranks' compute threads outnumber the CPUs",
    severity=Severity.WARNING,
    check=check,
    summary="Fires on a job that moves (healthy or slow) when every rank's environment sets its intra-op "
            "threads (OMP_NUM_THREADS, MKL_NUM_THREADS), their sum is at least twice the CPUs the ranks may "
            "use (Cpus_allowed_list, else the host's count), and the ranks' main threads waited on the run "
            "queue at least a fifth of the time over 3 s or more (/proc/PID/task/PID/schedstat).",
    fix="Set OMP_NUM_THREADS (and MKL_NUM_THREADS) to the CPUs per rank, or call torch.set_num_threads "
        "with that number in each rank.",
)
