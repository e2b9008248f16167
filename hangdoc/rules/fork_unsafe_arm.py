"""fork-unsafe-arm: forked DataLoader workers on aarch64 segfault in inherited thread pools."""
from __future__ import annotations

from hangdoc.model import Cause, Finding, Role, Severity
from hangdoc.rules.snippets import SPAWN_SNIPPET
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import dead_workers
from hangdoc.rules.samples import basename, samples_of

ARM = ("aarch64", "arm64")
POOL_LIBS = ("libgomp", "libiomp", "libarm_compute")


def _native_threads(bundle, pid: int) -> int:
    """Threads the kernel counts beyond those py-spy shows: OpenMP / BLAS pools."""
    return max((s.proc.num_threads - len(s.stack.threads) for _, s in samples_of(bundle, pid)
                if s.proc and s.stack and s.stack.threads), default=0)


def check(ctx: Context) -> list[Finding]:
    bundle = ctx.bundle
    if bundle.host.arch not in ARM:
        return []
    crashed = [w for w in dead_workers(ctx) if "segmentation" in w.how.lower() or "sigsegv" in w.how.lower()]
    findings = []
    for rank in sorted({w.rank for w in crashed}, key=lambda r: (r is None, r)):
        rank_info = next((r for r in bundle.job.ranks if r.rank == rank), None)
        family = ([rank_info] if rank_info else []) + [
            p for p in bundle.job.by_role(Role.WORKER) if rank_info is None or p.rank_pid == rank_info.pid]
        methods = {p.start_method for p in family if p.role is Role.WORKER and p.start_method}
        if methods - {"fork"}:
            continue   # spawned or forkserver workers inherit no thread pools
        libs = sorted({basename(lib) for p in family for lib in p.libs if basename(lib).startswith(POOL_LIBS)})
        threaded = sorted({(p.worker_index, native) for p in family if p.role is Role.WORKER
                           for native in [_native_threads(bundle, p.pid)] if native})
        if not libs and not threaded:
            continue
        evidence = [f"host {bundle.host.hostname}: {bundle.host.arch}, kernel {bundle.host.kernel}"]
        evidence += [w.log for w in crashed if w.rank == rank and w.log]
        evidence.append("DataLoader workers started with fork" if methods else
                        "DataLoader workers' start method not seen; Linux's default is fork")
        if libs:
            evidence.append(f"thread-pool libraries mapped before the fork: {', '.join(libs)}")
        if threaded:
            index, threads = max(threaded, key=lambda t: t[1])
            evidence.append(f"worker {index if index is not None else '?'} runs {threads} native threads "
                            "besides its Python ones: a thread pool (torch threads > 1)")
        who = f"rank {rank}" if rank is not None else "a rank"
        findings.append(finding(
            RULE, [rank],
            f"A forked DataLoader worker of {who} segfaulted on {bundle.host.arch}: OpenMP / Arm Compute "
            f"Library state does not survive fork",
            evidence, RULE.fix,
        ))
    return findings


RULE = Rule(
    slug="fork-unsafe-arm",
    title="Forked DataLoader workers segfault on aarch64",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on an aarch64 host when a DataLoader worker died of a segmentation fault, the "
            "workers were forked, and OpenMP / Arm Compute Library is mapped (or workers run several "
            "threads): the fork-inherited thread pools crash.",
    fix='Start DataLoader workers with spawn: DataLoader(..., '
        "multiprocessing_context=mp.get_context('spawn')); the dataset and collate_fn must be picklable.",
    snippet=SPAWN_SNIPPET,
    commands=("watch", "report", "run", "check"),
    causes=frozenset({Cause.WORKERS}),
)
