"""worker-deadlock: a DataLoader worker sleeps on a lock forever while its rank waits for data."""
from __future__ import annotations

from hangdoc.analyze.timeline import CPU_NOISE_S
from hangdoc.model import Cause, Finding, ProofKind, Severity
from hangdoc.rules.snippets import SPAWN_SNIPPET
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import rank_line, worker_name
from hangdoc.rules.samples import above_worker_loop, chain, in_futex, kernel_wait, latest_frames, samples_of

# Threads the stdlib and torch start on their own (queue feeders, pin-memory): not the job's locks.
_LIBRARY_FILES = ("threading.py", "multiprocessing/", "queue.py", "selectors.py", "concurrent/", "torch/")

MIN_ASLEEP_S = 2.0
NEVER_RAN_CPU_S = 0.05     # CPU a forked worker that never reached Python has used, at most
QUEUE_WAIT = "waiting for work on its index queue"


def asleep_in_futex(ctx: Context, pid: int) -> tuple[float, float, str] | None:
    """(seconds, CPU seconds, kernel wait) of the trailing run of samples spent in a futex, CPU flat."""
    seen = [(t, s) for t, s in samples_of(ctx.bundle, pid) if s.alive and s.proc is not None and s.proc.full]
    if not seen or not in_futex(seen[-1][1]):
        return None
    end_t, end = seen[-1]
    start_t, start = end_t, end
    for t, s in reversed(seen[:-1]):
        if not in_futex(s) or end.proc.cpu_s - s.proc.cpu_s > CPU_NOISE_S:
            break
        start_t, start = t, s
    return end_t - start_t, end.proc.cpu_s - start.proc.cpu_s, kernel_wait(ctx.bundle, end)


def check(ctx: Context) -> list[Finding]:
    # A worker's lock that worker-native-lock (before this rule) named the library of is said there.
    named = {r for f in ctx.findings if f.rule == "worker-native-lock" for r in f.ranks}
    # A worker the analysis proved stuck on such a lock (analyze/proofs.py) needs no MIN_ASLEEP_S more.
    proof = ctx.diagnosis.proof
    proven = proof.pid if proof is not None and proof.kind == ProofKind.FORK_LOCK else None
    findings = []
    for view in ctx.starved_culprits():
        if view.info.rank in named:
            continue
        evidence, stuck = [rank_line(ctx, view)], []
        for worker, reading, alive in view.workers:
            if not alive or reading.detail == QUEUE_WAIT:
                continue
            unborn = _never_reached_python(ctx, worker.pid) if reading.state == "unknown" else None
            if reading.state not in ("lock-wait", "idle") and unborn is None:
                continue
            asleep = asleep_in_futex(ctx, worker.pid)
            if asleep is None or (asleep[0] < MIN_ASLEEP_S and worker.node_pid != proven):
                continue
            seconds, cpu, wait = asleep
            if unborn is not None:
                stuck.append((worker, None))
                evidence.append(f"{worker_name(worker)} asleep in a futex ({wait}) all {seconds:.0f} s hangdoc "
                                f"watched it, {unborn:.2f} s CPU in all since it was forked")
                evidence.append(f"{worker_name(worker)} has no Python stack: {_no_stack_why(ctx, worker.pid)}; a "
                                "forked child that waits on a lock before it runs a line of Python")
            else:
                frames = above_worker_loop(latest_frames(ctx.bundle, worker.pid))
                top = reading.frame.label if reading.frame else "?"
                stuck.append((worker, top))
                evidence.append(f"{worker_name(worker)} asleep in a futex ({wait}) all {seconds:.0f} s hangdoc "
                                f"watched it, {cpu:.2f} s CPU, at {top}")
                evidence.append(f"{worker_name(worker)} stack: {chain(frames)}")
            if worker.start_method:
                evidence.append(f"{worker_name(worker)} start method: {worker.start_method}")
        if not stuck:
            continue
        evidence += _rank_threads(ctx, view.info)
        worker, top = stuck[0]
        index = worker.worker_index if worker.worker_index is not None else "?"
        where = f"at {top}" if top is not None else "it inherited at fork: it never reached Python"
        findings.append(finding(
            RULE, [view.info.rank],
            f"DataLoader worker {index} of rank {view.info.rank} is deadlocked on a lock {where}; "
            f"rank {view.info.rank} waits for its data",
            evidence, RULE.fix,
        ))
    return findings


def _never_reached_python(ctx: Context, pid: int) -> float | None:
    """The CPU a worker used in all, when py-spy tried to read its stack at two samples or more and
    never could, and it used next to none (a child forked while another thread of its rank held a
    lock, asleep on it from its first instant); None otherwise. A worker whose stack was not asked
    for (the cheap /proc read of a worker nobody looks at) is not one."""
    seen = [s for _, s in samples_of(ctx.bundle, pid) if s.alive and s.proc is not None]
    if not seen or any(s.stack is not None for s in seen):
        return None
    if sum(1 for s in seen if any(e.startswith("stack:") for e in s.errors)) < 2:
        return None
    cpu = seen[-1].proc.cpu_s
    return cpu if cpu <= NEVER_RAN_CPU_S else None


def _no_stack_why(ctx: Context, pid: int) -> str:
    said = " ".join(e for _, s in samples_of(ctx.bundle, pid) for e in (s.errors or ()))
    if "python interpreter" in said.lower():
        return "py-spy finds no Python interpreter in it"
    return "py-spy read none at any sample"


def _rank_threads(ctx: Context, rank) -> list[str]:
    """The rank's other Python threads: one of them held the lock when the workers were forked."""
    sample = ctx.bundle.last.sample_of(rank.pid)
    if sample is None or sample.stack is None:
        return []
    others = [t for t in sample.stack.threads if not t.is_main and t.frames
              and not all(f.short_filename.startswith(_LIBRARY_FILES) for f in t.frames)]
    if not others:
        return []
    named = "; ".join(f"{t.name} at {t.frames[0].label}" for t in others[:4])
    return [f"rank {rank.rank} runs threads besides MainThread (a lock one of them held at fork time "
            f"stays held in every forked worker): {named}"]


RULE = Rule(
    slug="worker-deadlock",
    title="A DataLoader worker is blocked on a lock it inherited",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang when the culprit waits on its DataLoader and one of its workers is "
            "alive but asleep in a futex (syscall 202 / 98, wchan futex_*) with no CPU used across "
            "samples, not on its index queue: a lock held across fork. Also for a worker with no Python "
            "stack at any sample (py-spy finds no interpreter in it) that has used next to no CPU since "
            "it was forked: it waits on the inherited lock before it runs a line of Python.",
    fix='Start workers with spawn or forkserver (multiprocessing_context=...) and create threads, locks '
        'and clients in worker_init_fn, not before the DataLoader forks.',
    snippet=SPAWN_SNIPPET,
    causes=frozenset({Cause.WORKERS}),
)
