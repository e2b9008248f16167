"""slow-rank: the job moves, but a few ranks make the others wait a large share of every step."""
from __future__ import annotations

from collections import Counter

from hangdoc.analyze.shares import is_step_wait, window
from hangdoc.model import Finding, RankState, Severity, SlowKind, Verdict
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import live_workers, most_common_line, worker_habit

_DOING = {RankState.COMPUTE: "computes", RankState.DATALOADER: "waits on its DataLoader", RankState.IO: "reads or writes files"}


def where(ctx: Context, pid: int) -> str | None:
    """The job's own line the rank was most often found at over its window, with how often."""
    line = ctx.timelines.get(pid)
    if line is None:
        return None
    points = [p for p in window(line) if p.reading.state not in (RankState.COLLECTIVE, RankState.EXITED)]
    found = most_common_line([p.sig for p in points])
    return f"{found[0]} ({found[1]} of {len(points)} samples outside the collectives)" if found else None


def waited_in(ctx: Context, views) -> str:
    """The step collective the waiting ranks were found in most often over their windows."""
    names = Counter(str(p.reading.detail) for v in views if (line := ctx.timelines.get(v.info.pid)) is not None
                    for p in window(line)
                    if p.reading.state == RankState.COLLECTIVE and is_step_wait(p.reading.detail))
    return names.most_common(1)[0][0] if names else "the step's collectives"


def share_line(rank: int | None, shares) -> str:
    low, high = shares.step_wait_interval
    return (f"rank {rank}: waits in the step's collectives {shares.step_wait:.0%} of {shares.samples} samples "
            f"(95 %: {low:.0%}-{high:.0%}), computes {shares.compute:.0%}, waits on data {shares.data:.0%}, "
            f"I/O {shares.io:.0%}")


def check(ctx: Context) -> list[Finding]:
    slow = ctx.diagnosis.slow
    if slow is None or slow.kind != SlowKind.STRAGGLER or ctx.diagnosis.verdict not in (Verdict.SLOW, Verdict.HEALTHY):
        return []
    views = [v for v in ctx.diagnosis.ranks if v.info.rank is not None]
    evidence = []
    for view in views:
        shares = ctx.shares(view)
        if shares is not None:
            evidence.append(share_line(view.info.rank, shares))
    late = [v for v in views if v.info.rank in slow.stragglers]
    for view in late:
        at = where(ctx, view.info.pid)
        if at:
            evidence.append(f"rank {view.info.rank} is mostly at {at}")
        if slow.doing == RankState.DATALOADER:    # its workers over the window, not only at its end
            habits = [worker_habit(ctx.bundle, w) for w in live_workers(ctx, view.info.pid)]
            evidence.extend(f"  {habit.text}" for habit in habits if habit is not None)
    evidence.append(f"without the straggler each step would take at most {1 / slow.speedup:.0%} "
                    f"of its time: up to {slow.speedup:.1f}x faster (an upper bound from the wait shares)")
    who = ", ".join(map(str, slow.stragglers))
    noun = "Rank" if len(slow.stragglers) == 1 else "Ranks"
    doing = _DOING.get(slow.doing or "", "is elsewhere")
    fix = RULE.fix
    if slow.doing == RankState.DATALOADER:
        fix = ("Its DataLoader cannot keep up: see the data findings above (slow-decompression, "
               "tar-member-decode) or give it more workers and cheaper samples; " + RULE.fix)
    return [finding(RULE, list(slow.stragglers),
                    f"{noun} {who} {'makes' if len(slow.stragglers) == 1 else 'make'} the others wait "
                    f"{slow.others_wait:.0%} of every step: it {doing} while they sit in "
                    f"{waited_in(ctx, [v for v in views if v not in late])}",
                    evidence, fix)]


RULE = Rule(
    slug="slow-rank",
    title="A straggler rank makes the others wait every step",
    severity=Severity.WARNING,
    check=check,
    summary="Fires on a job that still moves (verdict slow) when the others wait in the training step's "
            "collectives a large share of their samples and a few ranks do not, in both halves of the "
            "window: names the straggler, where it spends its time (the job's own line), the others' wait "
            "share with its 95 % interval and the speed-up without it, an upper bound.",
    fix="Give the straggler less to do or a faster path: balance its data or work (uneven shards, longer "
        "samples, a heavier branch of the model on that rank), check its host (other processes on its "
        "cores, a throttled or shared GPU) and its data pipeline.",
)
