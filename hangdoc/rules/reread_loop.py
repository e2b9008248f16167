"""reread-loop: a culprit's DataLoader worker reads one stretch of a file again and again, for ever."""
from __future__ import annotations

from hangdoc.model import Cause, Finding, ProcessInfo, Severity
from hangdoc.model.stack import own_frame
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import rank_line, worker_name
from hangdoc.rules.samples import above_worker_loop, basename, chain, cpu_use, latest_frames


def check(ctx: Context) -> list[Finding]:
    findings = []
    for view in ctx.starved_culprits():
        loops = [(w, read) for w, _, alive in view.workers if alive for read in ctx.rereads(w.pid)]
        if loops:
            findings.append(_finding(ctx, view, loops))
    return findings


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _finding(ctx: Context, view, loops: list[tuple[ProcessInfo, object]]) -> Finding:
    rank = view.info.rank
    evidence = [rank_line(ctx, view)]
    places = []
    for worker, read in loops:
        name = worker_name(worker)
        passes, _ = read.lapping
        lasted = ctx.bundle.last.time - read.laps_began       # what the samples saw of the loop
        size = f" ({_mb(read.size)})" if read.size else ""
        evidence.append(
            f"{name} reads {read.path}{size}: the same {_mb(read.lap)} from the file's start {passes} times in the "
            f"last {lasted:.0f} s of samples, to within 64 KB (its bytes read beyond its offset's moves, at {len(read.laps)} "
            f"samples, each a whole number of {read.lap:,} bytes): no new data")
        frames = above_worker_loop(latest_frames(ctx.bundle, worker.pid))
        if frames:
            evidence.append(f"{name} stack: {chain(frames)}")
        own = own_frame(frames)
        if own is not None:
            places.append(own.label)
        used = cpu_use(ctx.bundle, worker.pid)
        if used and used[1] > 0:
            evidence.append(f"{name} used {used[0]:.1f} s of CPU in {used[1]:.1f} s "
                            f"({100 * used[0] / used[1]:.0f}% of a core): it works, on the same bytes")
    worker, read = loops[0]
    index = worker.worker_index if worker.worker_index is not None else "?"
    more = f" (and {len(loops) - 1} more file{'s' if len(loops) > 2 else ''} of its workers the same way)" \
        if len(loops) > 1 else ""
    title = (f"Rank {rank}'s DataLoader worker {index} reads the first {_mb(read.lap)} of {basename(read.path)} "
             f"again and again{more}: no new data, a retry without end")
    where = f" at {places[0]}" if places else ""
    fix = (f"The worker's own loop{where} reads one record again and again: a retry without a limit, a "
           "checksum or an index that never matches, a seek back that never gets past it. Bound the retries "
           "and raise, or skip the record by name; decompressing faster will not end it.")
    return finding(RULE, [rank], title, evidence, fix)


RULE = Rule(
    slug="reread-loop",
    title="A rank's DataLoader worker reads the same stretch of a file for ever",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang when the culprit waits on its DataLoader and a live worker reads one lap of a "
            "file again and again: between its samples it read whole numbers of one lap (its bytes read "
            "beyond its offset's moves), 16 passes at least, short of the file's end. Cites the file, the "
            "lap, the passes, the worker's stack and its CPU; slow-decompression stands back for that worker.",
    fix="Bound the loop that reads the record again (a retry, a checksum that never matches) and raise or "
        "skip the record by name.",
    commands=("watch", "report", "run"),
    causes=frozenset({Cause.WORKERS}),
)
