"""workers-cpu-confined: a rank's DataLoader workers may run on fewer CPUs than the rank itself, so
loading runs on those few cores whatever num_workers says, and the rank waits for its data."""
from __future__ import annotations

from hangdoc.base.words import plural, rank_ranges
from hangdoc.model import Finding, Severity, Verdict
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import MIN_SAMPLES, STARVED_SHARE, data_shares, live_workers, worker_name
from hangdoc.rules.samples import samples_of

# OpenMP runtimes that set a thread's or a process's affinity as they start, and their settings.
_AFFINITY_ENV = ("KMP_AFFINITY", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")
_LLVM_OPENMP = ("libomp.so", "libiomp5.so")


def cpus_text(cpus) -> str:
    """"CPU 0" or "CPUs 0-3,8"."""
    return f"CPU {rank_ranges(cpus)}" if len(cpus) == 1 else f"CPUs {rank_ranges(cpus)}"


def allowed(ctx: Context, pid: int) -> tuple[frozenset[int], float, float] | None:
    """(CPUs the newest reading allows, CPU seconds used, over seconds) for `pid`; None where not read."""
    seen = [(t, s.proc) for t, s in samples_of(ctx.bundle, pid) if s.alive and s.proc is not None]
    if not seen or seen[-1][1].allowed_cpus is None:
        return None
    (t0, first), (t1, last) = seen[0], seen[-1]
    return last.allowed_cpus, last.cpu_s - first.cpu_s, t1 - t0


def check(ctx: Context) -> list[Finding]:
    if ctx.diagnosis.verdict not in (Verdict.HEALTHY, Verdict.SLOW):
        return []
    waiting = {rank: (w, a) for rank, w, a in data_shares(ctx) if a >= MIN_SAMPLES and w / a >= STARVED_SHARE}
    evidence, confined, shared, libs, env = [], [], set(), set(), {}
    for rank in ctx.bundle.job.ranks:
        if rank.rank not in waiting:
            continue
        own, workers = allowed(ctx, rank.pid), live_workers(ctx, rank.pid)
        reads = {w.pid: allowed(ctx, w.pid) for w in workers}
        if own is None or not workers or None in reads.values():
            continue
        union = frozenset().union(*(r[0] for r in reads.values()))
        if not (len(union) < len(own[0]) and len(union) < len(workers)):
            continue
        confined.append(rank.rank)
        shared |= union
        w, a = waiting[rank.rank]
        used = sum(r[1] for r in reads.values())
        span = max((r[2] for r in reads.values()), default=0.0)
        evidence.append(f"rank {rank.rank} (pid {rank.node_pid}) may run on {len(own[0])} CPUs "
                        f"({cpus_text(own[0])}) and waits for data in {w} of {a} samples ({100 * w / a:.0f}%); "
                        f"its {plural(len(workers), 'DataLoader worker')} may run on {cpus_text(union)} only")
        evidence += [f"{worker_name(wk)}: Cpus_allowed_list {rank_ranges(reads[wk.pid][0])}" for wk in workers]
        if span > 0:
            evidence.append(f"rank {rank.rank}'s workers used {used / span:.2f} CPU-seconds a second together, "
                            f"on the {plural(len(union), 'CPU')} they may use")
        libs |= {name for name in (lib.rsplit("/", 1)[-1] for lib in rank.libs) if name.startswith(_LLVM_OPENMP)}
        env.update({k: v for k, v in rank.env.items() if k in _AFFINITY_ENV})
    if not confined:
        return []
    if libs:
        evidence.append(f"the ranks map {', '.join(sorted(libs))} (LLVM / Intel OpenMP): conda's llvm-openmp 16 "
                        f"narrows a forked worker's affinity to its first core as the runtime starts "
                        f"(pytorch/pytorch#101850)")
    if env:
        evidence.append("OpenMP affinity settings in the ranks' environment: "
                        + ", ".join(f"{k}={v}" for k, v in sorted(env.items())))
    if not libs and not env:
        evidence.append("no OpenMP runtime that pins was seen mapped, nor an affinity setting in the environment: "
                        "something in the workers narrowed their CPUs (os.sched_setaffinity in worker_init_fn, "
                        "taskset, a library's thread pinning)")
    where = cpus_text(shared)
    return [finding(
        RULE, confined,
        f"The DataLoader workers of {'rank' if len(confined) == 1 else 'ranks'} {rank_ranges(confined)} are "
        f"confined to {where}: loading runs on {plural(len(shared), 'core')} whatever num_workers says",
        evidence, RULE.fix, cause=f"workers confined to {where}",
    )]


RULE = Rule(
    slug="workers-cpu-confined",
    title="The DataLoader workers may run on fewer CPUs than their rank",
    severity=Severity.WARNING,
    check=check,
    summary="Fires on a job that moves (healthy or slow) when a rank waits on its DataLoader in at least half "
            "its samples and its live workers may run, all together, on fewer CPUs than the rank itself and "
            "fewer than there are workers (/proc/PID/status Cpus_allowed_list, read with every sample at no "
            "extra cost); names the CPUs, the CPU the workers used, and the likely cause (an OpenMP runtime "
            "that pins, an affinity setting).",
    fix="Give the workers their rank's CPUs back. With conda's llvm-openmp 16, pin it below 16 "
        "(conda install 'llvm-openmp<16'); unset KMP_AFFINITY / OMP_PROC_BIND / OMP_PLACES / GOMP_CPU_AFFINITY "
        "where set; or restore the affinity in the worker: "
        "worker_init_fn=lambda _: os.sched_setaffinity(0, os.sched_getaffinity(os.getppid())).",
)
