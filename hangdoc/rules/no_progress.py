"""no-progress: every process of the job is frozen: same frames, no CPU, no bytes moved."""
from __future__ import annotations

from hangdoc.model import Cause, Finding, Severity, Verdict
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import rank_line, worker_lines
from hangdoc.rules.samples import frames_line
from hangdoc.rules.standing import held


def check(ctx: Context) -> list[Finding]:
    d = ctx.diagnosis
    if d.verdict != Verdict.HANG or not d.frozen:
        return []
    now = d.decided_at
    evidence = [f"no process moved for {now - d.onset:.0f} s (same frames, no CPU time, no bytes read or written)"]
    for view in d.ranks:
        evidence.append(rank_line(ctx, view))
        stack = frames_line(ctx.bundle, view.info.pid)
        if stack:
            evidence.append(f"  stack: {stack}")
        evidence.extend(worker_lines(view, ctx))
    who = "The process" if d.count(d.ranks) == 1 else "Every rank"
    ranks = [r for v in d.ranks for r in v.ranks]
    kinds = (Cause.PROCESS, Cause.OWN_CODE)
    fix = held(ctx, ranks, kinds)
    if fix is not None and not set(ranks) <= {r for k in kinds for r in ctx.explained(k)}:
        fix += " For the others: " + RULE.fix
    return [finding(RULE, ranks, f"{who} is frozen outside any collective (a deadlock or an endless wait)",
                    evidence, fix)]


RULE = Rule(
    slug="no-progress",
    title="Every process is frozen, outside any collective",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang where no rank is in a collective but no process moved for hang-after seconds: "
            "same frames, no CPU, no I/O (a deadlock, a wait on something that never comes).",
    fix="Look at the frame each process sleeps in: a lock taken twice, a queue nobody fills, "
        "a subprocess or socket that never answers. Run `hangdoc watch --native` to see the "
        "C frames (futex, poll) under the Python line.",
)
