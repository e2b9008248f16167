"""The Flight Recorder rule's sentences: what a group's facts (hangdoc/analyze/flight.py) read as."""
from __future__ import annotations

from hangdoc.analyze.flight import GroupFlight, Mismatch
from hangdoc.model.flight import op_name
from hangdoc.base.words import rank_ranges
from hangdoc.model import FrEntry, FrFrame


def _who(ranks) -> str:
    ranks = list(ranks)
    return f"rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)}"


def stuck_line(group: GroupFlight) -> str | None:
    """"ranks 0-6 entered all_reduce #4812 of the default group, rank 7 never did; its last
    completed collective was #4811"."""
    if group.stuck_seq is None:
        return None
    differs = next((m for m in group.mismatches if m.seq == group.stuck_seq), None)
    if differs is not None:
        return (f"{_who(group.entered)} entered collective #{group.stuck_seq} of {group.label}, but not the "
                f"same one: " + "; ".join(f"rank {rank} {_entry_text(group.progress(rank).at(group.stuck_seq))}"
                                          for rank, _ in differs.by_rank))
    what = f"{group.stuck_op or 'collective'} #{group.stuck_seq} of {group.label}"
    if not group.missing:
        return f"{_who(group.entered)} entered {what}; no rank completed it"
    lasts = {group.progress(r).last_completed for r in group.missing}
    last = lasts.pop() if len(lasts) == 1 else None
    its = "its" if len(group.missing) == 1 else "their"
    tail = f"; {its} last completed collective was #{last}" if last is not None else ""
    return f"{_who(group.entered)} entered {what}, {_who(group.missing)} never did{tail}"


def mismatch_line(group: GroupFlight, mismatch: Mismatch) -> str:
    parts = "; ".join(f"rank {rank}: {_entry_text(group.progress(rank).at(mismatch.seq))}"
                      for rank, _ in mismatch.by_rank)
    return f"collective #{mismatch.seq} of {group.label} differs between ranks ({mismatch.what}): {parts}"


def _entry_text(entry: FrEntry | None) -> str:
    if entry is None:
        return "-"
    sizes = "x".join("[" + ",".join(map(str, s)) + "]" for s in entry.input_sizes) or "[]"
    dtypes = ",".join(entry.input_dtypes) or "-"
    return f"{op_name(entry.op)} {sizes} {dtypes}"


def frames_text(frames: tuple[FrFrame, ...], depth: int = 4) -> str:
    """The caller's frames, innermost first, torch.distributed's own wrappers left out."""
    mine = [f for f in frames if "torch/distributed/" not in f.filename] or list(frames)
    return " <- ".join(f"{f.name} ({'/'.join(f.filename.split('/')[-2:])}:{f.line})" for f in mine[:depth])


def frames_lines(group: GroupFlight) -> list[str]:
    """Where each rank issued the stuck collective (FR's Python frames), one line per distinct place."""
    if group.stuck_seq is None:
        return []
    places: dict[str, list[int]] = {}
    for rank in group.entered:
        entry = group.progress(rank).at(group.stuck_seq)
        if entry is not None and entry.frames:
            places.setdefault(frames_text(entry.frames), []).append(rank)
    return [f"FR: {_who(ranks)} issued #{group.stuck_seq} at {where}" for where, ranks in places.items()]


def progress_lines(group: GroupFlight, limit: int = 8) -> list[str]:
    """"rank 7: last enqueued #4811, last completed #4811" for the ranks that are behind."""
    behind = [r for r in group.ranks if r.rank in group.missing] or list(group.ranks)
    lines = []
    for r in behind[:limit]:
        enq = "-" if r.last_enqueued is None else f"#{r.last_enqueued}"
        done = "-" if r.last_completed is None else f"#{r.last_completed}"
        lines.append(f"FR: rank {r.rank} of {group.label}: last enqueued {enq}, last completed {done}")
    return lines
