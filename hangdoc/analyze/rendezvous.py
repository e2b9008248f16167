"""Ranks that wait for the others to join: init_process_group, the rendezvous, the TCPStore.

Before a process group exists no collective runs, so a rank that never arrives leaves the
others parked in process-group setup: `init_process_group` (or `new_group`), torch's
rendezvous handlers, the TCPStore's get and wait, `_store_based_barrier`, gloo's full-mesh
connect. They read idle, and what they wait for is every rank of the job: the ranks that are
alive elsewhere, and the ranks whose process is missing from a node that was captured, are the
ones they wait for.
"""
from __future__ import annotations

from collections.abc import Sequence

from hangdoc.analyze.classify import per_stack
from hangdoc.analyze.timeline import Point, Timeline
from hangdoc.model import Frame, ProcessInfo, ProcSample, RankDigest, RankState
from hangdoc.model.capture import store_address

# Process-group setup as torch.distributed's Python frames name it.
SETUP_FUNCTIONS = frozenset({
    "init_process_group", "new_group", "new_subgroups", "new_subgroups_by_enumeration", "init_device_mesh",
    "_new_process_group_helper", "_new_group_with_tag", "_store_based_barrier", "rendezvous", "_rendezvous_helper",
    "_create_store_from_options", "_create_c10d_store", "_tcp_rendezvous_handler", "_env_rendezvous_handler",
    "_file_rendezvous_handler", "next_rendezvous", "_rendezvous",
})
SETUP_FILES = ("torch/distributed/rendezvous.py", "torch/distributed/elastic/rendezvous/")
# The same waits in native frames (py-spy --native): the store's client and gloo's connect.
SETUP_NATIVE = ("TCPStore", "TCPClient", "c10d::Store", "PrefixStore", "FileStore", "gloo::rendezvous",
                "connectFullMesh")
_NOT_JOINING = frozenset({RankState.COLLECTIVE, RankState.EXITED})


def _is_setup(frame: Frame) -> bool:
    if frame.native:
        return any(key in frame.name for key in SETUP_NATIVE)
    if "torch/distributed/" not in frame.filename:
        return False
    return frame.name.rsplit(".", 1)[-1] in SETUP_FUNCTIONS or any(f in frame.filename for f in SETUP_FILES)


@per_stack
def setup_frame(frames: tuple[Frame, ...]) -> Frame | None:
    """The outermost frame of process-group setup on a main thread's stack (innermost first):
    what the rank waits in for the others to join. None: it is not in setup."""
    found = None
    for frame in frames:
        if _is_setup(frame):
            found = frame
    return found


def joining(point: Point) -> Frame | None:
    """The setup frame a rank waits in at this point (not while a collective or gone)."""
    if point.reading.state in _NOT_JOINING:
        return None
    return setup_frame(point.sig)


def joining_since(line: Timeline) -> float | None:
    """Since when the rank has waited in process-group setup (None: it does not at its last sample)."""
    if joining(line.last) is None:
        return None
    return line.run_start("joining", lambda a, b: joining(a) is not None and joining(b) is not None)


def setup_name(frame: Frame) -> str:
    """"init_process_group", "new_group", "TCPStore": the setup call, as the job wrote it."""
    if frame.native:
        return next((key for key in SETUP_NATIVE if key in frame.name), frame.name)
    return frame.name.rsplit(".", 1)[-1]


def absent_ranks(ranks: Sequence[RankDigest]) -> tuple[int, ...]:
    """Ranks whose process is not there on a node that was captured: a node's ranks say how many
    it runs (LOCAL_WORLD_SIZE) and where its ranks start (RANK - LOCAL_RANK)."""
    present = {r.rank for r in ranks if r.rank is not None}
    world = max((r.world_size for r in ranks if r.world_size), default=None)
    expected: set[int] = set()
    for r in ranks:
        if r.rank is not None and r.local_rank is not None and r.local_world_size:
            first = r.rank - r.local_rank
            expected.update(range(first, first + r.local_world_size))
    return tuple(sorted(n for n in expected - present if n >= 0 and (world is None or n < world)))


def not_joined(ranks: Sequence[RankDigest]) -> tuple[int, ...]:
    """The ranks that live ranks wait for in process-group setup: alive elsewhere, absent from a
    captured node, or in setup too but never connected to the store the others reached (pointed
    elsewhere). Empty when no rank waits there, or when every rank does and reached the store (a
    job starting)."""
    alive = [r for r in ranks if r.exited_at is None]
    if not any(r.joining for r in alive):
        return ()
    elsewhere = {r.rank for r in alive if not r.joining and r.rank is not None}
    return tuple(sorted(elsewhere | set(absent_ranks(ranks)) | set(off_store(alive))))


def off_store(ranks: Sequence[RankDigest]) -> tuple[int, ...]:
    """Ranks in setup with no connection to the store that other ranks in setup are connected to."""
    reached = {r.store for r in ranks if r.joining and r.store_reached}
    return tuple(sorted(r.rank for r in ranks if r.joining and r.store in reached and r.store_reached is False
                        and r.rank is not None))


def store_fields(info: ProcessInfo, sample: ProcSample | None, in_setup: bool) -> dict:
    """The digest's store fields of a rank (`RankDigest.store`, `store_reached`, `generation`)."""
    fields = {"generation": info.generation}
    address = store_address(info)
    if not in_setup or address is None:
        return fields
    fields["store"] = address
    proc = sample.proc if sample is not None and sample.alive else None
    if proc is not None and proc.full:
        port = address.rpartition(":")[2]
        fields["store_reached"] = any(s.state == "ESTABLISHED" and s.remote.rpartition(":")[2] == port
                                      for s in proc.sockets)
    return fields
