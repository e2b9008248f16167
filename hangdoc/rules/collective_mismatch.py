"""collective-mismatch: ranks blocked in different collectives can never meet.

Who left the common path, where, and why come from the analysis (`analyze/divergence.py`): the
ranks' own lines side by side, the evidence that names the leaver (or that nothing does), the
values that differ, and the cause, whose own fix this rule gives."""
from __future__ import annotations

from hangdoc.base.words import rank_ranges
from hangdoc.model import Finding, Severity, SplitCause, Verdict
from hangdoc.rules.snippets import JOIN_SNIPPET
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.samples import frames_line

_UNEVEN = ('Give every rank the same number of batches and stop the epoch together: `drop_last=True` on the '
           'DistributedSampler (or shards split evenly over ranks and workers), or wrap the loop in '
           '`torch.distributed.algorithms.Join` so the ranks that finish early shadow the others\' collectives.')
FIXES = {
    SplitCause.HANDLER_COLLECTIVE:
        "An exception handler runs a collective on the rank that raised, alone. Agree on the error first: "
        "all-reduce an error flag every step (`flag = torch.tensor(int(failed)); dist.all_reduce(flag, "
        "op=dist.ReduceOp.MAX)`) so every rank takes the handler's collective together, or re-raise and keep "
        "collectives out of the handler (let the launcher restart the job).",
    SplitCause.SWALLOWED_EXCEPTION:
        "An exception swallowed on one rank skipped a collective the others ran. Re-raise it (a failed step "
        "should fail the job, which the launcher can restart), or decide together: all-reduce an error flag "
        "before the collective so every rank skips it or none does.",
    SplitCause.OWN_DECISION:
        "A decision taken on one rank's own values (early stopping on its own validation loss, a flag of its "
        "own) sent the ranks different ways. Decide on one rank and broadcast it (`dist.broadcast_object_list`), "
        "or all-reduce the flag (`stop = torch.tensor(int(stop)); dist.all_reduce(stop, op=dist.ReduceOp.MAX)`) "
        "so every rank takes the branch together.",
    SplitCause.CLOCK_DECISION:
        "A decision taken on each rank's own clock (a checkpoint or an evaluation every N seconds) comes due "
        "at different steps on different ranks. Decide on rank 0 and broadcast it every step, or count steps "
        "instead of seconds.",
    SplitCause.RANK_BRANCH:
        "A collective inside a branch on the rank (`if rank == 0:`) runs on that rank alone. Every rank must "
        "call every collective (for `gather`/`gather_object`, every rank calls it and only `dst` receives); "
        "move the collective out of the branch and keep only the rank's own work inside it.",
    SplitCause.WRAPPER_ON_ONE_RANK:
        "The {wrapper}-wrapped model is called on one rank alone, and its forward runs collectives of its own "
        "({wait}). For work on one rank (validation, logging, export), call the wrapped module directly "
        "(`model.module(x)`), or run that work on every rank.",
    SplitCause.EARLY_RETURN:
        "A function returns early on some ranks and skips the collective the others run inside it. Return "
        "on every rank or none: move the collective before the early return, or make the condition the same "
        "on every rank (broadcast or all-reduce it).",
    SplitCause.UNEVEN_DATA: _UNEVEN,
    SplitCause.SKIPPED:
        "Make every rank run the same collectives in the same order: the rank that left skipped the "
        "collective the others wait in; read the line where its path left (above) for why.",
    SplitCause.UNKNOWN:
        "Make every rank run the same collectives in the same order: compare the lines each rank stands at "
        "(above) and find the branch, handler or early exit one of them took alone.",
}


def check(ctx: Context) -> list[Finding]:
    d = ctx.diagnosis
    if d.verdict != Verdict.HANG or len(d.mismatch) < 2:
        return []
    groups = "; ".join(f"{name}: ranks {', '.join(map(str, ranks))}" for name, ranks in sorted(d.mismatch.items()))
    evidence = [f"ranks are blocked in different collectives: {groups}"]
    split = d.divergence
    if split is not None:
        if split.shared:
            evidence.append(f"their own code shares {split.shared}; there they part:")
        for place in split.places:
            word = "rank" if len(place.ranks) == 1 else "ranks"
            line = f"{word} {rank_ranges(place.ranks)} at {place.line}"
            line += f" `{place.text}`" if place.text else ""
            line += f" in {place.wait}" + (f" ({place.step})" if place.step else "")
            evidence.append(line)
        evidence.append(f"who left: {split.why}" if split.told else split.why)
        if split.at:
            evidence.append(f"where the path left: {split.at}")
        if split.exception:
            evidence.append(f"the exception that sent it there: {split.exception}")
        if split.differing:
            evidence.append("values that differ: " + "; ".join(split.differing))
    for view in d.waiting:
        stack = frames_line(ctx.bundle, view.info.pid, depth=4)
        if stack:
            evidence.append(f"rank {view.info.rank}: {stack}")
    all_ranks = [r for ranks in d.mismatch.values() for r in ranks]
    if d.culprits:
        title = f"Collective mismatch: rank(s) {', '.join(map(str, d.culprits))} left the common path ({groups})"
    else:
        title = f"Collective mismatch: the ranks wait in different collectives and nothing tells which left ({groups})"
    return [finding(RULE, all_ranks, title, evidence, fix_of(split, d.culprits))]


def fix_of(split, culprits) -> str:
    """The fix of the cause the analysis found; the generic one where it found none."""
    if split is None:
        return FIXES[SplitCause.UNKNOWN]
    wait = next((p.wait for p in split.places if set(p.ranks) & set(culprits)), "its collectives")
    return FIXES[split.cause].format(wrapper=split.wrapper or "DDP", wait=wait)


RULE = Rule(
    slug="collective-mismatch",
    title="Ranks wait in different collectives",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang where every rank is blocked in a collective but not the same one "
            "(all_reduce vs barrier). The rank that left the common path is named by evidence read from "
            "its own code (a handler, a branch, an early exit, a loop left or counters ahead), never by a "
            "preference; where nothing tells, the finding says so.",
    fix=FIXES[SplitCause.UNKNOWN],
    snippet=JOIN_SNIPPET,
)
