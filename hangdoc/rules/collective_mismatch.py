"""collective-mismatch: ranks blocked in different collectives can never meet.

Who left the common path, where, and why come from the analysis (`analyze/divergence.py`): the
ranks' own lines side by side, the evidence that names the leaver (or that nothing does), the
values that differ, and the cause, whose own fix this rule gives."""
from __future__ import annotations

from hangdoc.base.words import rank_ranges
from hangdoc.model import Finding, Severity, SplitCause, Verdict
from hangdoc.rules.snippets import JOIN_SNIPPET
from hangdoc.rules.split_fixes import FIXES
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.samples import frames_line



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
