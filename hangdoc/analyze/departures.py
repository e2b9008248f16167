"""The order of departure: the rank that left first explains the errors that follow. Pure.

A rank that runs one collective fewer than the others and leaves (pytorch/pytorch#138322:
`if rank != last: barrier()`, then `barrier()`) closes its connections while the others are still
inside a collective; on gloo they fail with "Connection closed by peer [127.0.0.1]:33674", and the
first error printed belongs to a rank that did nothing wrong. Two things name the leaver:

- the peer's address in the others' errors, matched to the rank whose socket held it (the ranks'
  TCP sockets, read from /proc at each sample);
- the exits: a rank that exited (code 0 included) before any rank failed, while others were
  still in the job.

The leaver is the culprit; the ranks that failed because it left are consequences.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from hangdoc.analyze.classify import classify_rank
from hangdoc.analyze.logs import all_lines, rank_exception
from hangdoc.base.kept import per_last
from hangdoc.base.parse import to_int
from hangdoc.base.words import rank_set
from hangdoc.model import Bundle, ProcessInfo, RankState, TcpSocket
from hangdoc.model.logline import line_rank

T = TypeVar("T")

# A peer's end of a connection, as the backends print it when the peer went away.
_PEER_GONE = (
    re.compile(r"Connection closed by peer \[([^\]]+)\]:(\d+)"),
    re.compile(r"\[([^\]]+)\]:(\d+): Connection reset by peer"),
    re.compile(r"Connection reset by peer \[([^\]]+)\]:(\d+)"),
)
_REMOTE_ERROR = ("ncclRemoteError", "remote process exiting prematurely", "remote process exited")


@dataclass(frozen=True)
class PeerError:
    """One rank's error that names a peer that went away (its address, and whose it was)."""

    rank: int                      # the rank that printed it
    address: str | None            # "127.0.0.1:33674" (None: NCCL's remote error names none)
    peer: int | None               # the rank that held that address, where the sockets tell
    line: str                      # the error, shortened


@dataclass(frozen=True)
class Departure:
    """The rank that left first, how and when, what it and the others were doing, and who paid."""

    rank: int
    pid: int                       # on its own node
    time: float                    # when it left: its exit, or the first error naming it
    how: str                       # "exited with code 0", "closed its connections (its process still running)"
    code: int | None               # its exit code, where it exited before the others failed
    named_by: tuple[PeerError, ...]   # the others' errors that name its address
    consequences: tuple[int, ...]  # the ranks that failed after it left
    others_in: tuple[tuple[int, str], ...] = ()   # (rank, the collective it was in when the leaver left)
    # It raised an exception of its own (printed before the others failed, its exit read after
    # theirs: its process group closed while the interpreter wound down): a crash of its own
    # making, told as one (rank-died, the exception quoted as the cause).
    own_error: bool = False

    @property
    def summary(self) -> str:
        """One line: who left, how, and what followed."""
        doing = _doing(self.others_in)
        after = f"; {rank_set(self.consequences)} then failed because it left" if self.consequences else ""
        return f"rank {self.rank} left first: it {self.how}{doing}{after}"


def _doing(others: tuple[tuple[int, str], ...]) -> str:
    if not others:
        return ""
    groups: dict[str, list[int]] = {}
    for rank, call in others:
        groups.setdefault(call, []).append(rank)
    parts = [f"{rank_set(ranks)} {'was' if len(ranks) == 1 else 'were'} in {call}"
             for call, ranks in groups.items()]
    return " while " + " and ".join(parts)


def printed_as(address: str) -> tuple[str, ...]:
    """The addresses a printed "host:port" may stand for: gloo prints a port in network byte order
    on a little-endian host (44063 reads 8108), so the port as printed and byte-swapped."""
    host, _, port = address.rpartition(":")
    number = int(port)
    swapped = ((number & 0xFF) << 8) | (number >> 8)
    return (address,) if swapped == number else (address, f"{host}:{swapped}")


def owner_of(address: str, owners: dict[str, int]) -> int | None:
    return next((owners[a] for a in printed_as(address) if a in owners), None)


def socket_owners(bundle: Bundle, ranks: list[ProcessInfo]) -> dict[str, int]:
    """"addr:port" -> the rank whose own end (its local address) that was, over every sample."""
    owners: dict[str, int] = {}
    for rank, sock in held_sockets(bundle, {p.pid: p.rank for p in ranks if p.rank is not None}):
        owners.setdefault(sock.local, rank)
    return owners


def held_sockets(bundle: Bundle, owners: dict[int, T]) -> Iterator[tuple[T, TcpSocket]]:
    """(owner, socket) for every socket the processes of `owners` (pid -> owner) held, sample by sample."""
    for snapshot in bundle.samples:
        for sample in snapshot.processes:
            owner = owners.get(sample.pid)
            if owner is None or sample.proc is None:
                continue
            for sock in sample.proc.sockets:
                yield owner, sock


def peer_errors(bundle: Bundle, owners: dict[str, int]) -> list[PeerError]:
    """The ranks' errors that say a peer went away, in the order printed, one per rank."""
    found: dict[int, PeerError] = {}
    for _, line in all_lines(bundle.logs):
        rank = line_rank(line)
        if rank is None or rank in found:
            continue
        for pattern in _PEER_GONE:
            if (match := pattern.search(line)) is not None:
                address = f"{match.group(1)}:{match.group(2)}"
                found[rank] = PeerError(rank, address, owner_of(address, owners), match.group(0))
                break
        else:
            if any(marker in line for marker in _REMOTE_ERROR):
                found[rank] = PeerError(rank, None, None, line.split("]:", 1)[-1].strip()[:200])
    return list(found.values())


@per_last
def departure_of(bundle: Bundle) -> Departure | None:
    """The rank that left first, where a rank's failure followed its leaving; None otherwise (no
    rank failed, the first to go failed on its own, a restarted job: `analyze/restarts.py`)."""
    ranks = list(bundle.job.ranks)
    if not ranks or any(p.generation or to_int(p.env.get("TORCHELASTIC_MAX_RESTARTS")) for p in bundle.job.all_ranks):
        return None   # a launcher that restarts: each start's failure is read by analyze/restarts.py
    exits = {p.pid: r for p in ranks if (r := bundle.exit_of(p.pid)) is not None and r.told}
    failed = sorted(((r.time, p) for p in ranks if (r := exits.get(p.pid)) is not None and (r.code or r.signal)),
                    key=lambda item: (item[0], item[1].rank if item[1].rank is not None else -1))
    errors = peer_errors(bundle, socket_owners(bundle, ranks))
    if not failed and not errors:
        return None
    named = [e for e in errors if e.peer is not None and e.peer != e.rank]
    leaver = _named_leaver(named, ranks) or _quiet_leaver(ranks, exits, failed)
    if leaver is None:
        return None
    record = exits.get(leaver.pid)
    first_failure = failed[0][0] if failed else None
    left_early = record is not None and (first_failure is None or record.time <= first_failure)
    if left_early and record.signal is not None:
        return None   # it died first, by a signal: rank-died says how
    own_error = rank_exception(bundle.logs, leaver.rank) is not None and (record is None or record.code != 0)
    when = record.time if left_early else (first_failure if first_failure is not None else bundle.last.time)
    if left_early:
        how = f"exited with code {record.code}" if record.signal is None else f"was killed by signal {record.signal}"
    else:
        how = "closed its connections (its process still running)"
    by = tuple(e for e in named if e.peer == leaver.rank)
    paid = sorted({p.rank for _, p in failed if p.rank != leaver.rank and p.rank is not None}
                  | {e.rank for e in by})
    return Departure(leaver.rank, leaver.node_pid, when, how, record.code if left_early else None, by, tuple(paid),
                     _others_in(bundle, ranks, leaver, when), own_error)


def _named_leaver(named: list[PeerError], ranks: list[ProcessInfo]) -> ProcessInfo | None:
    """The rank the others' errors name most (the first named on a tie)."""
    if not named:
        return None
    counts: dict[int, int] = {}
    for error in named:
        counts[error.peer] = counts.get(error.peer, 0) + 1
    best = max(counts, key=lambda r: (counts[r], -[e.peer for e in named].index(r)))
    return next((p for p in ranks if p.rank == best), None)


def _quiet_leaver(ranks: list[ProcessInfo], exits: dict, failed: list) -> ProcessInfo | None:
    """A rank that exited 0 before the first failure, while the others were still in the job."""
    if not failed:
        return None
    first = failed[0][0]
    early = sorted((r.time, p.rank or 0, p) for p in ranks if (r := exits.get(p.pid)) is not None
                   and r.code == 0 and r.signal is None and r.time <= first)
    return early[0][2] if early and len(early) < len(ranks) else None


RECENT_S = 2.0     # a stack this close before the leaving says what a rank was doing then


def _others_in(bundle: Bundle, ranks: list[ProcessInfo], leaver: ProcessInfo,
               when: float) -> tuple[tuple[int, str], ...]:
    """The collective each other rank was in when the leaver left: the one its error was raised in
    (torch's own frame), else its stack's at a sample shortly before."""
    doing = []
    for proc in ranks:
        if proc.pid == leaver.pid or proc.rank is None:
            continue
        raised = rank_exception(bundle.logs, proc.rank)
        if raised is not None and raised.where and "distributed_c10d.py" in raised.where:
            doing.append((proc.rank, raised.where.rpartition(" in ")[2]))
            continue
        for snapshot in reversed(bundle.samples):
            sample = snapshot.sample_of(proc.pid)
            if snapshot.time > when + 0.5 or sample is None or sample.stack is None or sample.stack.main is None:
                continue
            reading = classify_rank(sample)
            if reading.state == RankState.COLLECTIVE and snapshot.time >= when - RECENT_S:
                doing.append((proc.rank, str(reading.detail or "a collective")))
            break
    return tuple(doing)
