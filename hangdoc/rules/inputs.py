"""What a straggler's inputs show beside the others': bigger numbers in its loop's integer locals
(a sequence's length, a batch's token count), more bytes moved by it and its DataLoader workers.

The ranks of a DDP job step together, so over the same stretch of time each made the same steps:
bytes a second, compared across ranks, compare as bytes a step. A loop counter (`step`) stands at
the same value on every rank and compares as 1x; a rank's own number (`rank`, `local_rank`) says
nothing of its data, and is left out by name. py-spy prints a tensor as an address, not a shape:
a length is seen only where the loop holds it as an integer (`seq_len = x.shape[1]`)."""
from __future__ import annotations

import statistics

from hangdoc.analyze.timeline import Timeline
from hangdoc.base.words import size

BIGGER = 1.5                    # the straggler's number is at least this many times the others'
MIN_RATE = 64_000               # bytes a second below which a rank's DataLoader says nothing of its inputs
# Integer locals that name the process, not its data: the rank, the world, a seed, a port.
NOT_SIZES = ("rank", "world", "seed", "port", "pid", "device", "gpu", "worker")


def _window(ctx, line: Timeline) -> list:
    return ctx.window(line) or list(line.points)


def _locals(ctx, line: Timeline) -> dict[str, list[int]]:
    """Each integer local of the rank's loop frames over its window, by name."""
    values: dict[str, list[int]] = {}
    for point in _window(ctx, line):
        for frame in point.loop.frames if point.loop is not None else ():
            for name, value in frame.counters:
                values.setdefault(name, []).append(value)
    return values


def bigger_locals(ctx, late: list[Timeline], others: list[Timeline]) -> list[str]:
    """"seq_len 2,300 against 1,000": the integer locals the stragglers' loops hold at BIGGER times
    the others' (medians over their windows), the biggest difference first."""
    mine, theirs = _pooled(ctx, late), _pooled(ctx, others)
    found = []
    for name in mine.keys() & theirs.keys():
        if any(word in name.lower() for word in NOT_SIZES):
            continue
        own, base = statistics.median(mine[name]), statistics.median(theirs[name])
        if base >= 1 and own >= BIGGER * base:
            found.append((own / base, f"{name} {own:,.0f} against {base:,.0f}"))
    return [text for _, text in sorted(found, reverse=True)[:3]]


def _pooled(ctx, lines: list[Timeline]) -> dict[str, list[int]]:
    pooled: dict[str, list[int]] = {}
    for line in lines:
        for name, values in _locals(ctx, line).items():
            pooled.setdefault(name, []).extend(values)
    return pooled


def bytes_rate(ctx, rank: Timeline, workers: list[Timeline]) -> float | None:
    """Bytes a second the rank and its workers read and wrote over the rank's window (None: not read)."""
    points = _window(ctx, rank)
    if len(points) < 2 or points[-1].time <= points[0].time:
        return None
    start, end = points[0].time, points[-1].time
    moved, read = 0, False
    for line in [rank, *workers]:
        inside = [p for p in line.points if start <= p.time <= end and p.io_bytes is not None]
        if len(inside) >= 2:
            moved += max(0, inside[-1].io_bytes - inside[0].io_bytes)
            read = True
    return moved / (end - start) if read else None


def bigger_inputs(ctx, late: list[tuple[Timeline, list[Timeline]]],
                  others: list[tuple[Timeline, list[Timeline]]]) -> str | None:
    """What says the stragglers' inputs are bigger than the others', in one line; None when nothing does.
    Each entry is a rank's timeline with its workers'."""
    said = []
    sizes = bigger_locals(ctx, [rank for rank, _ in late], [rank for rank, _ in others])
    if sizes:
        said.append(f"its loop's integer locals are bigger ({'; '.join(sizes)}, medians over its samples)")
    mine = [r for rank, workers in late if (r := bytes_rate(ctx, rank, workers)) is not None]
    theirs = [r for rank, workers in others if (r := bytes_rate(ctx, rank, workers)) is not None]
    if mine and theirs:
        own, base = statistics.mean(mine), statistics.mean(theirs)
        if own >= MIN_RATE and own >= BIGGER * max(base, 1.0):
            said.append(f"it and its DataLoader workers moved {own / max(base, 1.0):.1f}x the bytes the others' did "
                        f"in the same steps ({size(own)}/s against {size(base)}/s)")
    return "its inputs are bigger than the others': " + "; ".join(said) if said else None
