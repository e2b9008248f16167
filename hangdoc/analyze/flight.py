"""What the ranks' Flight Recorder dumps say, per process group. Pure: records in, facts out.

For each group: every rank's last enqueued and last completed collective; the first collective
that not every rank completed (the one the job is stuck in), the ranks that entered it and those
that never issued it; collectives that differ between ranks at the same sequence number (op,
sizes, dtypes); and the Python frames FR recorded where each rank issued the stuck collective.

A rank's "last completed" is the larger of its pg_status `last_completed_collective` and the
highest sequence number among its retired (or completed) entries: gloo's pg_status can lag one
behind what its entries show.
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from functools import cached_property

from hangdoc.model import Bundle, FlightRecord, FlightSummary, FrEntry, Word
from hangdoc.model.flight import op_name

DEFAULT_GROUP = "0"
# Collectives whose tensors must have one shape on every rank; others (all_to_all, gather,
# scatter) legitimately differ, so only their op and dtypes are compared.
_SAME_SHAPE = ("all_reduce", "allreduce", "broadcast", "all_gather", "allgather", "reduce_scatter",
               "_allgather_base", "_reduce_scatter_base", "all_gather_into_tensor", "reduce_scatter_tensor",
               "reduce", "barrier")


@dataclass(frozen=True)
class RankProgress:
    rank: int
    last_enqueued: int | None
    last_completed: int | None
    entries: tuple[FrEntry, ...]         # this group's collectives, oldest first

    def at(self, seq: int) -> FrEntry | None:
        return self._by_seq.get(seq)

    @cached_property
    def _by_seq(self) -> dict[int, FrEntry]:
        return {e.seq: e for e in self.entries}


class MismatchKind(Word):
    """What differs between ranks at one sequence number, checked in this order."""

    OP = "op"
    DTYPES = "dtypes"
    SIZES = "sizes"


@dataclass(frozen=True)
class Mismatch:
    seq: int
    what: MismatchKind
    by_rank: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class GroupFlight:
    name: str
    desc: str
    ranks: tuple[RankProgress, ...]
    stuck_seq: int | None                # the first collective not every rank completed
    entered: tuple[int, ...] = ()        # ranks that issued stuck_seq
    missing: tuple[int, ...] = ()        # ranks (with a dump) that never issued it
    mismatches: tuple[Mismatch, ...] = ()
    no_dump: tuple[int, ...] = ()        # members the group's config names, whose dump is absent

    @property
    def label(self) -> str:
        if self.name == DEFAULT_GROUP or self.desc == "default_pg":
            return "the default group"
        return f"group {self.name}" + (f" ({self.desc})" if self.desc and self.desc != "undefined" else "")

    def progress(self, rank: int) -> RankProgress | None:
        return next((r for r in self.ranks if r.rank == rank), None)

    @property
    def stuck_op(self) -> str | None:
        for rank in self.entered:
            entry = self.progress(rank).at(self.stuck_seq) if self.progress(rank) else None
            if entry is not None:
                return op_name(entry.op)
        return None


def _progress(records: list[FlightRecord], name: str) -> list[RankProgress]:
    out = []
    for record in sorted(records, key=lambda r: r.rank):
        entries = tuple(sorted((e for e in record.entries if e.pg_name == name and not e.is_p2p and e.seq >= 0),
                               key=lambda e: e.seq))
        group = next((g for g in record.groups if g.name == name), None)
        if group is None and not entries:
            continue
        enqueued = [v for v in (group.last_enqueued if group else None,
                                entries[-1].seq if entries else None) if v is not None and v >= 0]
        completed = [v for v in [group.last_completed if group else None,
                                 *(e.seq for e in entries if e.retired or e.state == "completed")]
                     if v is not None and v >= 0]
        out.append(RankProgress(record.rank, max(enqueued, default=None), max(completed, default=None), entries))
    return out


def _mismatches(ranks: list[RankProgress]) -> tuple[Mismatch, ...]:
    seqs = sorted({e.seq for r in ranks for e in r.entries})
    found = []
    for seq in seqs:
        at = [(r.rank, r.at(seq)) for r in ranks if r.at(seq) is not None]
        if len(at) < 2:
            continue
        for what, value in ((MismatchKind.OP, lambda e: op_name(e.op)),
                            (MismatchKind.DTYPES, lambda e: ",".join(e.input_dtypes)),
                            (MismatchKind.SIZES, lambda e: "x".join("[" + ",".join(map(str, s)) + "]" for s in e.input_sizes))):
            if what is MismatchKind.SIZES and not all(op_name(e.op) in _SAME_SHAPE for _, e in at):
                continue
            values = {rank: value(e) for rank, e in at}
            if len(set(values.values())) > 1:
                found.append(Mismatch(seq, what, tuple(sorted(values.items()))))
                break
    return tuple(found)


def flight_groups(records) -> tuple[GroupFlight, ...]:
    """One GroupFlight per process group the dumps mention (the default group first).

    With several dumps of one rank (a pipe dump and an older timeout dump), the one that
    recorded the most progress is used.
    """
    latest: dict[int, FlightRecord] = {}
    for record in records:
        known = latest.get(record.rank)
        if known is None or _weight(record) > _weight(known):
            latest[record.rank] = record
    chosen = list(latest.values())
    names = list(dict.fromkeys(n for r in chosen for n in [*(g.name for g in r.groups), *(e.pg_name for e in r.entries)]))
    groups = []
    for name in sorted(names, key=lambda n: (n != DEFAULT_GROUP, n)):
        ranks = _progress(chosen, name)
        if not ranks:
            continue
        desc = next((g.desc for r in chosen for g in r.groups if g.name == name and g.desc), "")
        desc = desc or next((e.pg_desc for r in ranks for e in r.entries if e.pg_desc), "")
        members = next((g.ranks for r in chosen for g in r.groups if g.name == name and g.ranks), ())
        no_dump = tuple(sorted(set(members) - {r.rank for r in ranks}))
        groups.append(_stuck(name, desc, ranks, no_dump))
    return tuple(groups)


def _weight(record: FlightRecord) -> tuple:
    top = max((e.seq for e in record.entries), default=-1)
    return (top, len(record.entries), any(e.frames for e in record.entries), record.mtime or 0.0)


def _stuck(name: str, desc: str, ranks: list[RankProgress], no_dump: tuple[int, ...]) -> GroupFlight:
    mismatches = _mismatches(ranks)
    done = [r.last_completed if r.last_completed is not None else 0 for r in ranks]
    seq = min(done) + 1
    entered = tuple(r.rank for r in ranks if r.last_enqueued is not None and r.last_enqueued >= seq)
    if not entered:
        return GroupFlight(name, desc, tuple(ranks), None, mismatches=mismatches, no_dump=no_dump)
    missing = tuple(r.rank for r in ranks if r.rank not in entered)
    return GroupFlight(name, desc, tuple(ranks), seq, entered, missing, mismatches, no_dump)


# --- for the progress signal ---------------------------------------------------------------------


def fr_progress(bundle: Bundle) -> dict[int, int]:
    """rank -> last completed collective of the default group (else of the first group naming the rank),
    from the bundle's Flight Recorder dumps; ranks without a dump are absent."""
    out: dict[int, int] = {}
    groups = flight_groups(bundle.flight_records)
    for group in groups:
        for r in group.ranks:
            if r.last_completed is not None and r.rank not in out:
                out[r.rank] = r.last_completed
    return out


def fr_step_times(records) -> list[float]:
    """When a rank's Flight Recorder showed it completing collectives: the time of each of its
    dumps whose default group's last completed sequence number passed the previous dump's."""
    by_rank: dict[int, list[FlightRecord]] = {}
    for record in records:
        if record.mtime is not None:
            by_rank.setdefault(record.rank, []).append(record)
    times = []
    for dumps in by_rank.values():
        dumps.sort(key=lambda r: r.mtime)
        seqs = [_default_completed(r) for r in dumps]
        times += [b.mtime for (a, b), (sa, sb) in zip(zip(dumps, dumps[1:]), zip(seqs, seqs[1:]))
                  if sa is not None and sb is not None and sb > sa]
    return times


def fr_pending(records) -> tuple[float, int | None, str] | None:
    """The oldest collective of the default group that a rank's latest Flight Recorder dump shows
    enqueued and not yet completed (sequence number past the group's last completed, not
    retired): (when it was created, the rank, its op). The wait for it has lasted since then, on
    NCCL too, where a waiting rank's main thread may spin instead of sleeping."""
    latest: dict[int | None, FlightRecord] = {}
    for record in records:
        if record.mtime is not None and (record.rank not in latest or record.mtime > latest[record.rank].mtime):
            latest[record.rank] = record
    oldest = None
    for record in latest.values():
        completed = _default_completed(record)
        if completed is None:
            continue
        for entry in record.entries:
            if (entry.pg_name in ("0", "default_pg", "") and not entry.retired and entry.seq > completed
                    and entry.time_created_ns and math.isfinite(entry.time_created_ns / 1e9)):
                created = entry.time_created_ns / 1e9
                if oldest is None or created < oldest[0]:
                    oldest = (round(created, 3), record.rank, entry.op.split(":")[-1])
    return oldest


def _default_completed(record: FlightRecord) -> int | None:
    groups = sorted(record.groups, key=lambda g: g.name not in ("0", "default_pg", ""))
    return next((g.last_completed for g in groups if g.last_completed is not None), None)


def flight_summary(configs, dumps: int = 0) -> FlightSummary | None:
    configs = list(configs)
    if not configs:
        return None
    return FlightSummary(tuple(sorted({c.state for c in configs})),
                         tuple(sorted({c.buffer_size for c in configs if c.buffer_size})),
                         sum(c.pipe_exists for c in configs), len(configs), dumps)
