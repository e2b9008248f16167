"""collective-straggler: most ranks wait in a collective for one that is elsewhere."""
from __future__ import annotations

from hangdoc.analyze.jobfacts import GLOO, NCCL
from hangdoc.model import Finding, RankState, Severity, Verdict, Wait
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import gpu_lines, rank_line, waiting_line, worker_lines
from hangdoc.rules.samples import frames_line
from hangdoc.rules.standing import held


# How to name the exact collective next time, by the job's backend: NCCL dumps its Flight Recorder
# on a timeout or when its pipe is written; gloo records it too but only the job itself can dump it.
RECORD_NEXT_TIME = {
    NCCL: "To name the exact collective next time, keep PyTorch's Flight Recorder on (TORCH_FR_BUFFER_SIZE=2000; "
          "TORCH_NCCL_TRACE_BUFFER_SIZE is its legacy alias), let NCCL dump it on a timeout "
          "(TORCH_NCCL_DUMP_ON_TIMEOUT=1) or on hangdoc's request (TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/tmp/fr_pipe_), "
          "and set a shorter init_process_group(timeout=...).",
    GLOO: "To name the exact collective next time, keep PyTorch's Flight Recorder on (TORCH_FR_BUFFER_SIZE=2000): "
          "gloo has no dump on a timeout and no dump pipe, so dump it from the job "
          "(torch._C._distributed_c10d._dump_fr_trace() from a watchdog thread or a signal handler), "
          "and set a shorter init_process_group(timeout=...).",
}


def fix_for(ctx: Context) -> str:
    """The generic fix, with the record-it-next-time advice of the job's own backend (both, named,
    where the bundle does not say which)."""
    said = ctx.backend
    if said in RECORD_NEXT_TIME:
        return f"{GENERIC} {RECORD_NEXT_TIME[said]}"
    return f"{GENERIC} On NCCL: {RECORD_NEXT_TIME[NCCL]} On gloo: {RECORD_NEXT_TIME[GLOO]}"


def _quiet(ctx, waiting) -> str:
    """How long the waiting ranks have not stepped, on the report's one clock: since hangdoc saw
    them stop, or, when the wait was under way before it attached, since the onset the past told
    (a lower bound)."""
    d = ctx.diagnosis
    now = d.decided_at
    # No rank has stepped since the hang's onset, whatever the last sample caught a waiting rank
    # doing: a rank that moved into its wait since still has not stepped.
    seen = min(v.blocked_since or now for v in waiting)
    if d.onset is not None and ctx.bundle.samples and ctx.bundle.samples[0].time <= d.onset < seen:
        seen = d.onset
    since = ctx.on_clock(seen)
    if since < seen:
        return f"none of them stepped for at least {now - since:.0f} s, since before hangdoc attached"
    return f"none of them stepped for {now - seen:.0f} s"


def check(ctx: Context) -> list[Finding]:
    d = ctx.diagnosis
    if d.verdict != Verdict.HANG or d.mismatch or not d.culprits:
        return []
    waiting = d.waiting
    if not waiting:
        return []
    now = d.decided_at
    collective = waiting[0].reading.detail or "a collective"
    spin = None
    if collective == Wait.SPIN:
        where = waiting[0].reading.frame.label if waiting[0].reading.frame else "one line"
        collective = f"a spin at their sync line, {where}"
        spin = (f"decided by no progress: no rank stepped and none is in a collective its frames show; "
                f"{d.count(waiting)} burn CPU at {where} with their loop counters still: NCCL's shape of a "
                "wait (the collective sits on the GPU stream and the host spins at the next sync, as .item() does)")
    findings = []
    for view in ctx.culprit_views():
        doing = view.reading.state + (f" ({view.reading.detail})" if view.reading.detail else "")
        evidence = [f"{d.count(waiting)} of {d.count(d.ranks)} ranks wait in {collective} ({_quiet(ctx, waiting)})",
                    rank_line(ctx, view)] + ([spin] if spin else [])
        evidence += [line for w in waiting[:2] if (line := waiting_line(ctx, w))]
        stack = frames_line(ctx.bundle, view.info.pid)
        if stack:
            evidence.append(f"rank {view.info.rank} stack: {stack}")
        evidence.extend(worker_lines(view, ctx))
        evidence.extend(gpu_lines(ctx, waiting, view))
        if view.reading.state == RankState.EXITED:
            title = f"Rank {view.info.rank} left: the others wait in {collective} for a rank that exited"
            fix = LEFT
        else:
            title = f"Rank {view.info.rank} is the straggler: the others wait in {collective} while it is in {doing}"
            fix = held(ctx, view.ranks) or fix_for(ctx)
        findings.append(finding(RULE, [view.info.rank], title, evidence, fix))
    return findings


GENERIC = "Look at what the late rank is doing and balance its data or work."
LEFT = ("A rank that leaves before the others (its data ran out, an early return, an exception caught at the top) "
        "leaves them in a collective it never joins; where a process it started still holds its sockets, the backend "
        "sees no closed connection and they wait out the process group's timeout. Make every rank run the same "
        "collectives to the end (even out the data: DistributedSampler(drop_last=True), or "
        "torch.distributed.algorithms.Join for uneven inputs), and let a rank that must stop early exit non-zero, "
        "so that the launcher ends the others.")

RULE = Rule(
    slug="collective-straggler",
    title="A rank is late to the collective everyone else waits in",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang where the majority of ranks are blocked in one collective and a "
            "minority is elsewhere (data loader, compute, I/O); names the minority and what it does.",
    fix=f"{GENERIC} To name the exact collective next time, keep PyTorch's Flight Recorder on "
        "(TORCH_FR_BUFFER_SIZE=2000) and dump it: on NCCL on a timeout (TORCH_NCCL_DUMP_ON_TIMEOUT=1) or on "
        "hangdoc's request (TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/tmp/fr_pipe_); on gloo from the job itself "
        "(torch._C._distributed_c10d._dump_fr_trace()); and set a shorter init_process_group(timeout=...). "
        "The report gives the advice of the job's own backend.",
)
