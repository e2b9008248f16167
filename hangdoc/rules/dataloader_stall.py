"""dataloader-stall: the culprit waits on its DataLoader and no more specific rule explains why."""
from __future__ import annotations

from hangdoc.model import Cause, Finding, ProofKind, RankState, Severity
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.clock import worker_doing
from hangdoc.rules.evidence import rank_line, worker_name
from hangdoc.rules.samples import (
    above_worker_loop, chain, cpu_use, file_read_line, file_reads, kernel_wait, latest_frames, samples_of,
)
from hangdoc.rules.waits import holds_own_pipe, pipe_line, pipe_self_fix


def check(ctx: Context) -> list[Finding]:
    d = ctx.diagnosis
    waiting = ctx.starved_culprits()
    if not waiting:
        return []
    explained = ctx.explained(Cause.WORKERS)   # a rule before this one named the workers' cause: it stays quiet
    findings = []
    for view in waiting:
        if view.info.rank in explained:
            continue
        evidence = [rank_line(ctx, view)]
        doing = []
        for worker, reading, alive in view.workers:
            if alive:
                evidence += _worker_evidence(ctx, worker, reading)
                doing.append(_doing(ctx, worker, reading))
        gone = sum(not alive for _, _, alive in view.workers)
        if gone:
            evidence.append(f"{gone} more worker(s) exited (earlier epochs' or loaders'; worker-died names a death)")
        if not view.workers:
            evidence.append("no DataLoader worker seen: the rank loads data in its main process (num_workers=0)")
        summary = "; ".join(doing) or "no worker alive"
        findings.append(finding(
            RULE, [view.info.rank],
            f"Rank {view.info.rank} waits on its DataLoader and no worker delivers: {summary}",
            evidence, _fix(ctx, view),
        ))
    return findings


def _fix(ctx: Context, view) -> str:
    """The fix; where the analysis proved a worker reads a pipe only it can write, how to end that first."""
    proof = ctx.diagnosis.proof
    proven = proof.pid if proof is not None and proof.kind == ProofKind.PIPE_NO_WRITER else None
    stuck = [w for w, _, alive in view.workers if alive and w.node_pid == proven and holds_own_pipe(ctx, w.pid, w.pid)]
    return f"{pipe_self_fix(worker_name(stuck[0]))} {RULE.fix}" if stuck else RULE.fix


def _doing(ctx, worker, reading) -> str:
    index = worker.worker_index if worker.worker_index is not None else "?"
    if reading.state == RankState.IDLE and "queue" in (reading.detail or ""):
        return f"worker {index} waits for work"
    return f"worker {index} {worker_doing(ctx, worker, reading)}"


def _worker_evidence(ctx: Context, worker, reading) -> list[str]:
    name = worker_name(worker)
    detail = f" ({reading.detail})" if reading.detail else ""
    lines = [f"{name}: {reading.state}{detail}"]
    frames = above_worker_loop(latest_frames(ctx.bundle, worker.pid))
    if frames:
        lines.append(f"{name} stack: {chain(frames)}")
    last = next((s for _, s in reversed(samples_of(ctx.bundle, worker.pid)) if s.proc and s.proc.full), None)
    used = cpu_use(ctx.bundle, worker.pid)
    if last is not None:
        cpu = f"; {used[0]:.2f} s CPU in {used[1]:.1f} s" if used else ""
        lines.append(f"{name} kernel: {kernel_wait(ctx.bundle, last)}{cpu}")
    pipe = pipe_line(ctx, worker.pid, name)
    if pipe is not None:
        lines.append(pipe)
    for read in file_reads(ctx.bundle, worker.pid):
        lines.append(f"{name} has open {file_read_line(read)}")
    return lines


RULE = Rule(
    slug="dataloader-stall",
    title="A rank waits on its DataLoader and its workers deliver nothing",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang when the culprit waits in DataLoader.__next__ and no more specific rule "
            "(decompression, tar decode, deadlock, dead or failing worker) explains its workers; shows "
            "what every worker is doing: stack, kernel wait, CPU, open files.",
    fix='Set DataLoader(timeout=...) so a stuck worker raises instead of hanging, and look at the worker '
        'stacks for the I/O or decode frame they sit in.',
    causes=frozenset({Cause.DATA}),
)
