"""What the ranks of a start that never finished its start-up wait for: the store, a peer, or an
address left from an earlier start. Pure: read from their sockets at the last sample.

A rank in process-group setup first connects to the store its launcher named (MASTER_ADDR,
MASTER_PORT; torchrun's c10d rendezvous hands out its own), writes its own listening address
there and reads its peers' (gloo's full-mesh connect), then connects to them. Where it stands
tells what it waits for: no connection to the store (the store), the store reached but no peer
connected (its peers' addresses, or peers that never connect back), or a connection toward an
address that one of an earlier start's ranks listened on (a stale address the store kept).
"""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.analyze.departures import held_sockets, printed_as
from hangdoc.model.capture import store_address
from hangdoc.base.words import start_name
from hangdoc.model import Bundle, ProcessInfo

_CONNECTING = frozenset({"ESTABLISHED", "SYN_SENT", "SYN_RECV"})


@dataclass(frozen=True)
class RankSetup:
    """One rank in setup, as its sockets read: the store, its own listener, its peers."""

    rank: int | None
    pid: int
    store: str | None                          # the store its environment names
    reached_store: bool | None                 # None: its sockets were not read
    listens: tuple[str, ...] = ()              # its own listening addresses (gloo's, for its peers)
    peers: tuple[str, ...] = ()                # connections to addresses other than the store
    stale: tuple[tuple[str, str], ...] = ()    # (address, whose it was in an earlier start)

    @property
    def waits_for(self) -> str:
        """"store", "stale" or "peers": what the rank waits for, as its sockets tell."""
        if self.reached_store is False:
            return "store"
        if self.stale:
            return "stale"
        return "peers"


def setup_of(bundle: Bundle, procs: list[ProcessInfo]) -> tuple[RankSetup, ...]:
    """Each rank's setup as its sockets at the last sample read (an empty tuple: none was read)."""
    earlier = _earlier_listeners(bundle, min((p.generation for p in procs), default=0))
    found = []
    for proc in procs:
        sample = bundle.last.sample_of(proc.pid)
        stat = sample.proc if sample is not None and sample.alive else None
        store = store_address(proc)
        if stat is None or not stat.full:
            found.append(RankSetup(proc.rank, proc.node_pid, store, None))
            continue
        port = store.rpartition(":")[2] if store else None
        reached = any(s.state == "ESTABLISHED" and s.remote.rpartition(":")[2] == port for s in stat.sockets)
        listens = tuple(sorted(s.local for s in stat.sockets if s.state == "LISTEN"))
        peers = tuple(sorted({s.remote for s in stat.sockets if s.state in _CONNECTING
                              and s.remote.rpartition(":")[2] != port}))
        stale = tuple((a, owner) for a in peers if (owner := _owner(a, earlier)) is not None)
        found.append(RankSetup(proc.rank, proc.node_pid, store, reached if store else None, listens, peers, stale))
    return tuple(found)


def _earlier_listeners(bundle: Bundle, generation: int) -> dict[str, str]:
    """Address -> "rank 1's address in the first start", for every address an earlier start's rank
    listened on (as printed, and byte-swapped as gloo prints a port)."""
    earlier = {p.pid: p for p in bundle.job.all_ranks if p.generation < generation}
    owners: dict[str, str] = {}
    for proc, sock in held_sockets(bundle, earlier):
        if sock.state == "LISTEN":
            host, _, port = sock.local.rpartition(":")
            for address in printed_as(sock.local if host not in _ANY else f"*:{port}"):
                owners[address] = f"rank {proc.rank}'s address in {start_name(proc.generation)}"
    return owners


_ANY = ("0.0.0.0", "::", "[::]")


def _owner(address: str, owners: dict[str, str]) -> str | None:
    """Whose listener an address was: itself, or a listener on every address with its port."""
    return owners.get(address) or owners.get(f"*:{address.rpartition(':')[2]}")
