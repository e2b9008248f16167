"""collective-mismatch: ranks blocked in different collectives can never meet."""
from __future__ import annotations

from hangdoc.model import Finding, Severity, Verdict
from hangdoc.rules.snippets import JOIN_SNIPPET
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.samples import frames_line


def check(ctx: Context) -> list[Finding]:
    d = ctx.diagnosis
    if d.verdict != Verdict.HANG or len(d.mismatch) < 2:
        return []
    groups = "; ".join(f"{name}: ranks {', '.join(map(str, ranks))}" for name, ranks in sorted(d.mismatch.items()))
    evidence = [f"ranks are blocked in different collectives: {groups}"]
    for view in d.waiting:
        stack = frames_line(ctx.bundle, view.info.pid, depth=4)
        if stack:
            evidence.append(f"rank {view.info.rank}: {stack}")
    left = ", ".join(map(str, d.culprits)) or "?"
    all_ranks = [r for ranks in d.mismatch.values() for r in ranks]
    return [finding(
        RULE, all_ranks,
        f"Collective mismatch: rank(s) {left} left the common path ({groups})",
        evidence, RULE.fix,
    )]


RULE = Rule(
    slug="collective-mismatch",
    title="Ranks wait in different collectives",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang where every rank is blocked in a collective but not the same one "
            "(all_reduce vs barrier): the ranks outside the training step's collective left the common path.",
    fix='Make every rank run the same collectives in the same order: give every rank the same number of '
        'batches and stop the epoch together (Join, or a monitored_barrier on a gloo group).',
    snippet=JOIN_SNIPPET,
)
