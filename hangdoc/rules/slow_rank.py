"""slow-rank: the job moves, but a few ranks make the others wait a large share of every step."""
from __future__ import annotations

from collections import Counter

from hangdoc.analyze.slow import CPU_WAIT
from hangdoc.base.stats import interval
from hangdoc.base.words import share_words
from hangdoc.model import RUNQUEUE_SAID, Finding, RankState, Severity, SlowKind, Verdict
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import live_workers, worker_habit
from hangdoc.rules.inputs import bigger_inputs
from hangdoc.rules.samples import most_common_line

_DOING = {RankState.COMPUTE: "computes", RankState.DATALOADER: "waits on its DataLoader", RankState.IO: "reads or writes files",
          CPU_WAIT: "waits for a CPU"}


def where(ctx: Context, pid: int) -> str | None:
    """The job's own line the rank was most often found at over its window, with how often."""
    line = ctx.timelines.get(pid)
    if line is None:
        return None
    points = [p for p in ctx.window(line) if p.reading.state not in (RankState.COLLECTIVE, RankState.EXITED)]
    found = most_common_line([p.sig for p in points])
    return f"{found[0]} ({found[1]} of {len(points)} samples outside the collectives)" if found else None


def waited_in(ctx: Context, views) -> str:
    """The step collective the waiting ranks were found in most often over their windows."""
    names = Counter(str(p.reading.detail) for v in views if (line := ctx.timelines.get(v.info.pid)) is not None
                    for p in ctx.window(line)
                    if p.reading.state == RankState.COLLECTIVE and ctx.is_step_wait(p.reading.detail))
    return names.most_common(1)[0][0] if names else "the step's collectives"


# The headline's shares (TimeShares.parts), in this finding's words: each rank's add up to its whole.
SHARE_WORDS = {"step_wait": "waits in the step's collectives", "other_wait": "in other collectives",
               "data": "waits on data", "compute": "computes", "io": "I/O", "other": "other"}


def share_line(rank: int | None, shares) -> str:
    """"rank 0, over 14 samples: waits in the step's collectives 14% (95 %: 4%-40%), waits on data
    79%, computes 0%, other 7%": the shares the headline says, adding up to 100 %."""
    return f"rank {rank}, over {shares.samples} samples: " + share_words(shares, SHARE_WORDS, "(95 %: {low:.0%}-{high:.0%})")


def sync_line(ctx: Context, rank: int | None, at: str, line) -> list[str]:
    """How often the rank stood at the job's sync line over its window."""
    counts = ctx.counted(line) if line is not None else None
    if counts is None or not counts.n:
        return []
    hits = counts.at(at)
    low, high = interval(hits, counts.n)
    return [f"rank {rank}: stands at the sync line {at} in {hits} of {counts.n} samples ({hits / counts.n:.0%}, "
            f"95 %: {low:.0%}-{high:.0%})"]


_ACTIVITY = {RankState.COMPUTE: "its own compute", RankState.DATALOADER: "waiting on its DataLoader",
             RankState.IO: "files", CPU_WAIT: "waiting on a run queue for a CPU"}
CPU_FIX = ("It is the machine's share, not the rank's work: its main thread waits for a CPU that other processes hold. "
           "Give each rank cores of its own (taskset / numactl, Slurm's --cpus-per-task, fewer DataLoader workers or "
           "OMP_NUM_THREADS per rank) and move other work off them.")


def cause_line(slow) -> str:
    """What told the cause: each activity's share of a step against the others', and the workers' cores."""
    parts = [f"{_ACTIVITY.get(state, state)} {own:.0%} of {'its time' if state == CPU_WAIT else 'a step'} "
             f"(the others {theirs:.0%})"
             for state, own, theirs in slow.excess
             if (own or theirs) and (state != CPU_WAIT or max(own, theirs) >= RUNQUEUE_SAID)]
    mine, theirs = slow.workers_cpu
    if mine is not None and theirs is not None and max(mine, theirs) >= 0.01:   # workers that did nothing say nothing
        parts.append(f"its DataLoader workers used {mine:.2f} cores (the others' {theirs:.2f})")
    return "what keeps it: " + "; ".join(parts)


BIGGER_FIX = ("Its inputs are bigger than the others' (longer samples, larger batches): balance them across ranks "
              "(shuffle before cutting the data into ranks' shares, bucket by length across ranks, or cap the "
              "length); a corpus sorted by length and cut into contiguous chunks gives the last rank the longest.")


CPU_ALSO = ("Its main thread also waits for a CPU that other processes hold: give each rank cores of its own "
            "(taskset / numactl, Slurm's --cpus-per-task, fewer DataLoader workers or OMP_NUM_THREADS per rank).")
DATA_FIX = ("Its DataLoader cannot keep up: see the data findings above (slow-decompression, tar-member-decode) or "
            "give it more workers and cheaper samples;")


def _fix(doing, bigger: bool) -> str:
    """The fix for what keeps the straggler: bigger inputs are balanced first (the generic advice's
    "balance its data", said of its own), then its DataLoader or the CPUs it waits for."""
    if bigger:
        extra = {CPU_WAIT: CPU_ALSO, RankState.DATALOADER: DATA_FIX.replace(";", ".")}.get(doing)
        return BIGGER_FIX + (" " + extra if extra else "")
    if doing == CPU_WAIT:
        return CPU_FIX + " " + RULE.fix
    if doing == RankState.DATALOADER:
        return DATA_FIX + " " + RULE.fix
    return RULE.fix


def _bigger_inputs(ctx: Context, late, others) -> str | None:
    """What says the stragglers' inputs are bigger: their loops' integer locals, their workers' bytes."""
    def lines(views):
        return [(line, [w for p in live_workers(ctx, v.info.pid) if (w := ctx.timelines.get(p.pid)) is not None])
                for v in views if (line := ctx.timelines.get(v.info.pid)) is not None]
    return bigger_inputs(ctx, lines(late), lines(others))


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
        if slow.at is not None:
            evidence.extend(sync_line(ctx, view.info.rank, slow.at, ctx.timelines.get(view.info.pid)))
    late = [v for v in views if v.info.rank in slow.stragglers]
    for view in late:
        at = where(ctx, view.info.pid)
        if at:
            evidence.append(f"rank {view.info.rank} is mostly at {at}")
        if slow.doing == RankState.DATALOADER:    # its workers over the window, not only at its end
            habits = [worker_habit(ctx.bundle, w) for w in live_workers(ctx, view.info.pid)]
            evidence.extend(f"  {habit.text}" for habit in habits if habit is not None)
    if slow.excess:
        evidence.append(cause_line(slow))
    bigger = _bigger_inputs(ctx, late, [v for v in views if v not in late])
    if bigger:
        evidence.append(bigger)
    evidence.append(f"without the straggler each step would take at most {1 / slow.speedup:.0%} "
                    f"of its time: up to {slow.speedup:.1f}x faster (an upper bound from the wait shares)")
    who = ", ".join(map(str, slow.stragglers))
    noun = "Rank" if len(slow.stragglers) == 1 else "Ranks"
    doing = _DOING.get(slow.doing or "", "is elsewhere")
    fix = _fix(slow.doing, bigger is not None)
    if slow.at is not None:
        evidence.append("the step's collectives return at once and each rank waits for them at its next sync "
                        "line (NCCL's shape of a wait; `.item()`, `.cpu()`, a flag it spins on): the ranks that "
                        "stand there most wait for the one that hardly does")
        where_they_wait = f"stand at their sync line {slow.at}"
    else:
        where_they_wait = f"sit in {waited_in(ctx, [v for v in views if v not in late])}"
    bigger_said = "its inputs are bigger, and " if bigger else ""
    return [finding(RULE, list(slow.stragglers),
                    f"{noun} {who} {'makes' if len(slow.stragglers) == 1 else 'make'} the others wait "
                    f"{slow.others_wait:.0%} of every step: {bigger_said}it {doing} while they {where_they_wait}",
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
