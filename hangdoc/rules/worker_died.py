"""worker-died: a DataLoader worker was killed by a signal or vanished under its rank."""
from __future__ import annotations

from hangdoc.model import Cause, Finding, Severity
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import DeadWorker, dead_workers, generation_of
from hangdoc.rules.samples import samples_of
from hangdoc.base.words import mb

# What each way of dying usually means, said after the fix.
_HINTS = {
    "Killed": "SIGKILL is what the kernel's OOM killer sends: every worker holds up to prefetch_factor "
              "(default 2) batches, so num_workers x prefetch_factor x the memory of one batch must fit "
              "beside the ranks; lower num_workers or prefetch_factor, or make batches smaller.",
    "Segmentation fault": "A native crash in the worker: a C extension, or a thread pool (OpenMP, "
                          "Arm Compute Library) inherited across fork; try multiprocessing_context="
                          "mp.get_context('spawn').",
    "Bus error": "Shared memory ran out: the batches the workers hand over live in /dev/shm; enlarge it "
                 "(docker --shm-size) or lower num_workers / prefetch_factor.",
}


def _hint(how: str) -> str | None:
    return next((text for key, text in _HINTS.items() if key.lower() in how.lower()), None)


def _memory_line(ctx: Context, dead: DeadWorker) -> str | None:
    """The most memory the worker, its siblings and its rank held in any sample."""
    info = dead.info or None
    rank_pid = info.rank_pid if info is not None else next(
        (r.pid for r in ctx.bundle.job.ranks if r.rank == dead.rank), None)
    if rank_pid is None:
        return None

    def peak(pid: int) -> int:
        return max((s.proc.rss_bytes for _, s in samples_of(ctx.bundle, pid) if s.proc), default=0)

    workers = generation_of(ctx, rank_pid, dead.pid)
    own = peak(dead.pid)
    parts = [f"this worker {mb(own)}"] if own else []
    others = [peak(w.pid) for w in workers if w.pid != dead.pid]
    if others and max(others):
        parts.append(f"its {len(others)} sibling worker(s) up to {mb(max(others))} each")
    rank_rss = peak(rank_pid)
    if rank_rss:
        parts.append(f"rank {dead.rank} {mb(rank_rss)}")
    return ("resident memory seen: " + ", ".join(parts)) if parts else None


def _in_flight(ctx: Context, dead: DeadWorker) -> str:
    """The batches in flight on the worker's rank at the default prefetch_factor, and their memory."""
    rank_pid = dead.info.rank_pid if dead.info is not None else None
    workers = generation_of(ctx, rank_pid, dead.pid) if rank_pid is not None else []
    n = max([w.num_workers for w in workers if w.num_workers] + [len(workers)])
    if not n:
        return ""
    peak = max((s.proc.rss_bytes for w in workers for _, s in samples_of(ctx.bundle, w.pid) if s.proc), default=0)
    held = f"; its workers held up to {mb(peak)} each" if peak else ""
    return f" Here: {n} workers x prefetch_factor 2 = {2 * n} batches in flight on rank {dead.rank}{held}."


def _exit_lines(ctx: Context, pid: int) -> list[str]:
    """What the worker's exit record says, when the capture read one."""
    record = next((e for e in getattr(ctx.bundle, "exits", ()) if e.pid == pid and e.told), None)
    if record is None:
        return []
    lines = [f"pid {pid} exit status: " + (f"killed by signal {record.signal}" if record.signal is not None
                                            else f"exited with code {record.code}")
             + (" (core dumped)" if record.core_dumped else "")]
    if record.oom_killed:
        rose = next(c for c in record.oom if c.rose)
        lines.append(f"the OOM kill count of {rose.source} went from {rose.before} to {rose.after} while it ran")
    return lines


def check(ctx: Context) -> list[Finding]:
    findings = []
    for dead in dead_workers(ctx):
        index = dead.info.worker_index if dead.info is not None else None
        name = f"DataLoader worker {index}" if index is not None else "A DataLoader worker"
        of = f" of rank {dead.rank}" if dead.rank is not None else ""
        evidence = []
        if dead.log:
            evidence.append(dead.log)
        if dead.pid is None:
            evidence += _unseen_lines(ctx, dead)
            findings.append(finding(RULE, [dead.rank], f"{name}{of} was killed by signal: {dead.how}", evidence,
                                    _fix(ctx, dead)))
            continue
        seen = samples_of(ctx.bundle, dead.pid)
        alive = [t for t, s in seen if s.alive]
        gone = next((t for t, s in seen if not s.alive), None)
        if alive and gone is not None:
            start = ctx.bundle.samples[0].time
            evidence.append(f"pid {dead.pid} alive in {len(alive)} sample(s) up to +{alive[-1] - start:.1f} s, "
                            f"gone at +{gone - start:.1f} s")
        elif not seen:
            evidence.append(f"pid {dead.pid} died before the capture saw it")
        if dead.why and dead.how == "vanished":
            evidence.append(f"pid {dead.pid} {dead.why}")
        evidence += _exit_lines(ctx, dead.pid)
        if dead.info is not None and dead.info.start_method:
            evidence.append(f"start method: {dead.info.start_method}")
        memory = _memory_line(ctx, dead)
        if memory and dead.how in ("Killed", "vanished"):
            evidence.append(memory)
        how = "vanished while its rank waits for data" if dead.how == "vanished" else (
            dead.how if dead.how == "exited unexpectedly" else f"was killed by signal: {dead.how}")
        findings.append(finding(RULE, [dead.rank], f"{name} (pid {dead.pid}){of} {how}", evidence, _fix(ctx, dead)))
    return findings


def _fix(ctx: Context, dead: DeadWorker) -> str:
    fix = RULE.fix
    if (hint := _hint(dead.how)):
        fix = f"{fix} {hint}"
    if dead.how in ("Killed", "vanished"):
        fix += _in_flight(ctx, dead)
    return fix


def _unseen_lines(ctx: Context, dead: DeadWorker) -> list[str]:
    """A worker the samples cannot name (none seen, or several gone at one sample): the line it wrote
    as it died names the signal, not its pid or rank; its rank's own failure, raised in its
    DataLoader's iterator, says whose it was."""
    if dead.among:
        start = ctx.bundle.samples[0].time
        pids = ", ".join(str(pid) for pid in dead.among)
        which = (f"which of its workers, the samples cannot tell: pids {pids} were all first seen gone at "
                 f"+{dead.gone_at - start:.1f} s" if len(dead.among) > 1 else
                 f"pid {dead.among[0]}, the first of its workers gone (+{dead.gone_at - start:.1f} s)")
    else:
        which = "no sample saw the worker alive: it died before the watch found it"
    lines = [f"the worker wrote that line as the signal killed it (PyTorch's worker signal handler); {which}"]
    raised = ctx.worked.exception_of(dead.rank)
    if raised is not None and raised.in_loader:
        at = f" ({raised.where})" if raised.where else ""
        lines.append(f"rank {dead.rank} then failed in its DataLoader's iterator: {raised.messages[-1]}{at}: "
                     "a consequence of its worker's death")
    return lines


RULE = Rule(
    slug="worker-died",
    title="A DataLoader worker was killed or vanished",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on `DataLoader worker (pid N) is killed by signal: X` / `exited unexpectedly` in the "
            "log tails, on an exit record that names a fatal signal, or when a worker seen alive is gone "
            "alone (not with the other workers forked with it) while its rank waits for data without stepping "
            "and no newer worker replaced it. Workers that ended with their epoch, their loader or their "
            "rank are retired, not dead; SIGKILL points at the OOM killer (with the memory seen).",
    fix='Read the signal: Segmentation fault on aarch64 -> spawn start method; Bus error -> /dev/shm too '
        'small (docker --shm-size); Killed -> out of memory (fewer workers, smaller prefetch_factor).',
    causes=frozenset({Cause.WORKERS}),
)
