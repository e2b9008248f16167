"""worker-native-lock: a forked DataLoader worker waits for ever inside a native library whose
threads its parent started before the fork (OpenMP, MKL, tokenizers' rayon, OpenCV, gRPC, CUDA)."""
from __future__ import annotations

from hangdoc.analyze.timeline import CPU_NOISE_S
from hangdoc.model import Cause, Finding, Severity
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import rank_line, worker_name
from hangdoc.rules.samples import kernel_wait, samples_of
from hangdoc.rules.native_libs import native_probe, stuck_in
from hangdoc.rules.snippets import SPAWN_SNIPPET

QUEUE_WAIT = "waiting for work on its index queue"
POOL_ENV = ("TOKENIZERS_PARALLELISM", "OMP_NUM_THREADS", "MKL_NUM_THREADS")   # what sizes or allows the pools


def check(ctx: Context) -> list[Finding]:
    findings = []
    for view in ctx.starved_culprits():
        evidence, named = [rank_line(ctx, view)], []
        for worker, reading, alive in view.workers:
            if not alive or reading.detail == QUEUE_WAIT or reading.state not in ("lock-wait", "idle"):
                continue
            probe = native_probe(ctx.bundle, worker.pid)
            stuck = stuck_in(probe[1].main.frames) if probe else None
            still = _still_since(ctx, worker.pid, probe[0]) if probe else None
            if stuck is None or still is None:
                continue
            named.append((worker, stuck, reading))
            seconds, cpu, wait = still
            evidence.append(f"{worker_name(worker)} native stack: {stuck.chain}"
                            + (f" <- {reading.frame.label}" if reading.frame else ""))
            evidence.append(f"{worker_name(worker)} stuck in {stuck.name}, asleep in a "
                            f"futex ({wait}), {cpu:.2f} s CPU in the {seconds:.0f} s since that read")
            if stuck.library is not None:
                evidence.append(f"{stuck.library.name}: {stuck.library.why}")
            if worker.start_method:
                evidence.append(f"{worker_name(worker)} start method: {worker.start_method}")
        if not named:
            continue
        mapped = sorted({lib.rsplit("/", 1)[-1] for lib in view.info.libs
                         if any(lib.endswith("/" + s.shared_object) for _, s, _ in named)})
        if mapped:
            evidence.append(f"rank {view.info.rank} maps {', '.join(mapped)} itself")
        settings = [f"{k}={view.info.env[k]}" for k in POOL_ENV if k in view.info.env]
        if settings:
            evidence.append(f"rank {view.info.rank}'s environment: {', '.join(settings)}")
        worker, stuck, reading = named[0]
        index = worker.worker_index if worker.worker_index is not None else "?"
        at = f" at {reading.frame.label}" if reading.frame else ""
        fix = stuck.library.fix if stuck.library else (
            f"{stuck.shared_object} holds a lock or waits for a thread that did not survive the fork: "
            f"use it only after the fork (in worker_init_fn or inside the worker), or start the workers "
            f"with spawn (DataLoader(multiprocessing_context='spawn')).")
        findings.append(finding(
            RULE, [view.info.rank],
            f"DataLoader worker {index} of rank {view.info.rank} waits for ever inside {stuck.name}{at}; "
            f"rank {view.info.rank} waits for its data",
            evidence, fix,
        ))
    return findings


def _still_since(ctx: Context, pid: int, since: float) -> tuple[float, float, str] | None:
    """(seconds, CPU seconds, kernel wait) from the probe to the newest sample, when the worker was
    in a futex at every full sample since and used no CPU beyond noise; None otherwise."""
    seen = [(t, s) for t, s in samples_of(ctx.bundle, pid) if t >= since and s.proc is not None and s.proc.full]
    if not seen or not all(s.alive and s.proc.in_futex for _, s in seen):
        return None
    cpu = seen[-1][1].proc.cpu_s - seen[0][1].proc.cpu_s
    if cpu > CPU_NOISE_S:
        return None
    return seen[-1][0] - seen[0][0], cpu, kernel_wait(ctx.bundle, seen[-1][1])


RULE = Rule(
    slug="worker-native-lock",
    title="A forked DataLoader worker waits inside a native library's pool",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang when the culprit waits on its DataLoader and one of its workers sleeps in a "
            "futex with no CPU used, and hangdoc's one native read of that worker (made once per stack, "
            "no flag needed) shows it inside a library: OpenMP (libgomp, libomp, libiomp5), MKL, "
            "tokenizers' rayon pool, OpenCV, gRPC or CUDA, each with its own fix; any other library is "
            "named by its shared object.",
    fix="Use the library only after the DataLoader forks (in worker_init_fn or inside the worker), or start "
        "the workers with spawn (DataLoader(multiprocessing_context='spawn')).",
    snippet=SPAWN_SNIPPET,
    causes=frozenset({Cause.WORKERS}),
)
