"""The bundles of one job's nodes joined into one bundle, so the diagnosis sees every rank.

Each node's hangdoc captures only its own ranks, on its own clock and rhythm. The merge
checks the bundles belong together (one run id and master address, one run, disjoint
ranks), tags every process with its node's host, keeps pids of different nodes apart,
and lays the nodes' samples into rounds by time: a round holds at most one sample of each
node, and the last round holds every node's last sample. A process appears only in the
rounds its node was sampled in, so `timelines()` and `diagnose()` read the merged bundle
exactly as they read one node's, and `bundle.last` shows every rank.

A record the merge builds from several (the bundle, its job, a round's snapshot, its GPUs, the
options) names only the fields it computes; every other field is joined by `_joined`, and a
record it changes is copied with its other fields as they are, so a field added to the model
comes through a merge without a change here.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from itertools import chain
from dataclasses import dataclass
from typing import TypeVar

from hangdoc.base.errors import BadBundle, HangdocError
from hangdoc.base.words import span
from hangdoc.model import (
    BUNDLE_SCHEMA, PID_STRIDE, Bundle, GpuProcess, GpuState, Job, Options, ProcessExit, ProcessInfo, ProcSample,
    Snapshot, Wrapper,
)

# Ranks of one run start within seconds of each other on every node (after the rendezvous);
# ranks that started this far apart belong to different runs (a restart, or a new job that
# reuses the run id and master port, as static rendezvous's run id "none" always does).
SAME_RUN_S = 15 * 60.0

R = TypeVar("R")


@dataclass(frozen=True)
class _Node:
    name: str            # the file it came from
    bundle: Bundle
    slot: int            # its place in the merged job, ordered by its lowest rank

    @property
    def host(self) -> str:
        return self.bundle.host.hostname


def job_label(job: Job | JobId) -> str:
    """How a job is named to the user: "run none at 127.0.0.1:29500, world size 2"."""
    where = f"{job.master_addr}:{job.master_port}" if job.master_addr or job.master_port else "no master address"
    size = f", world size {job.world_size}" if job.world_size is not None else ""
    return f"run {job.run_id or '?'} at {where}{size}"


def merge_bundles(bundles: Sequence[Bundle], names: Sequence[str] | None = None) -> Bundle:
    """One bundle for the job from its nodes' bundles; a HangdocError (exit 2) when they do not fit."""
    names = list(names) if names is not None else [f"bundle {i + 1}" for i in range(len(bundles))]
    if not bundles:
        raise BadBundle("no bundle to merge")
    for name, bundle in zip(names, bundles):
        if not bundle.samples:
            raise BadBundle(f"{name} holds no sample")
        check_distributed(bundle.job, name)
    if len(bundles) == 1:
        return bundles[0]
    check_one_job([JobId.of(b) for b in bundles], names)
    nodes = sorted((_Node(n, b, 0) for n, b in zip(names, bundles)), key=lambda n: _lowest_rank(n.bundle))
    nodes = [dataclasses.replace(node, slot=i) for i, node in enumerate(nodes)]
    renumber = _pids_collide(nodes)
    moved = [_relabel(node, renumber) for node in nodes]
    # the job's processes, flight_config and exits are every node's; host and hangdoc_version the
    # lowest ranks' node's (every process carries its own host)
    return _joined(
        moved,
        schema=BUNDLE_SCHEMA,
        created=max(b.created for b in moved),
        job=_joined([b.job for b in moved], launcher_pid=None),   # one launcher per node; each stays in `processes`
        samples=_rounds([b.samples for b in moved]),
        logs=tuple(dataclasses.replace(log, source=f"{b.host.hostname}:{log.source}") for b in moved for log in b.logs),
        options=options_of([b.options for b in moved]),
        exit_code=exit_code_of([b.exit_code for b in moved]),
        data_lists=tuple({c.path: c for b in moved for c in b.data_lists}.values()),
        # each node's Flight Recorder dumps are its own ranks': together they are the job's record
        flight_records=tuple(dataclasses.replace(r, host=r.host or b.host.hostname)
                             for b in moved for r in b.flight_records),
        flight_errors=tuple(f"{b.host.hostname}: {e}" for b in moved for e in b.flight_errors),
        set_aside=tuple(f"{b.host.hostname}: {e}" for b in moved for e in b.set_aside),
        ras=_first(b.ras for b in moved if b.ras is not None and b.ras.status == "ok") or _first(b.ras for b in moved),
    )


def merge_stream(bundles: Iterable[Bundle], names: Sequence[str]) -> Bundle:
    """`merge_bundles` over bundles read one at a time (a generator of loads): each node's
    bundle is checked as it arrives, so a bad one stops the merge before the rest are read."""
    kept = []
    for name, bundle in zip(names, bundles):
        if not bundle.samples:
            raise BadBundle(f"{name} holds no sample")
        kept.append(bundle)
    return merge_bundles(kept, names)


# --- do they belong together ------------------------------------------------------------


@dataclass(frozen=True)
class JobId:
    """What tells one job's nodes from another's: run id, master, world size, and each rank with
    its start time (`ranks[i]` started at `starts[i]`; apart, a million ranks are two tuples a node,
    not a pair each)."""

    run_id: str | None
    master_addr: str | None
    master_port: int | None
    world_size: int | None
    ranks: tuple[int | None, ...]
    starts: tuple[float, ...]

    @classmethod
    def of(cls, bundle: Bundle) -> "JobId":
        job = bundle.job
        return cls(job.run_id, job.master_addr, job.master_port, job.world_size,
                   tuple(p.rank for p in job.ranks), tuple(p.start_time for p in job.ranks))


def check_distributed(job: Job, name: str) -> None:
    """A HangdocError (exit 2) when `name` is a --single capture: only a distributed job's nodes merge."""
    if job.single_process:
        raise HangdocError(f"{name} is a --single capture of one process; only bundles of a "
                           "distributed job's nodes can be merged")


def check_one_job(jobs: Sequence[JobId], names: Sequence[str]) -> None:
    """A HangdocError (exit 2) unless the nodes are of one job, one run, and disjoint in ranks."""
    ref, ref_name = jobs[0], names[0]
    for name, b in zip(names[1:], jobs[1:]):
        a = ref
        same = ((a.run_id, a.master_addr, a.master_port) == (b.run_id, b.master_addr, b.master_port)
                and (a.world_size is None or b.world_size is None or a.world_size == b.world_size))
        if not same:
            raise HangdocError(f"{ref_name} and {name} are bundles of different jobs "
                               f"({job_label(a)} vs {job_label(b)}); merge the bundles of one job only")
    starts = [(min(job.starts), name) for name, job in zip(names, jobs) if job.starts]
    if starts:
        (early, early_name), (late, late_name) = min(starts), max(starts)
        if late - early > SAME_RUN_S:
            raise HangdocError(
                f"{early_name} and {late_name} are of different runs of {job_label(ref)}: their ranks "
                f"started {span(late - early)} apart (a restart, or a new job on the same run id and port); "
                "merge the bundles of one run only")
    # Counted first, in passes that make no call a rank: a million ranks are rarely given twice.
    distinct = set(chain.from_iterable(job.ranks for job in jobs))
    if len(distinct) == sum(len(job.ranks) for job in jobs) and None not in distinct:
        return
    owner: dict[int, int] = {}
    for i, job in enumerate(jobs):
        for rank in job.ranks:
            if rank is None:
                continue
            first = owner.setdefault(rank, i)
            if first != i:
                where = (f"{names[first]} twice" if names[first] == names[i]
                         else f"both {names[first]} and {names[i]}")
                raise HangdocError(
                    f"rank {rank} is in {where}: give each node's bundle once (two captures of one "
                    "node cannot be merged; keep the newer one)")


def _lowest_rank(bundle: Bundle) -> tuple:
    ranks = [p.rank for p in bundle.job.ranks if p.rank is not None]
    return (min(ranks) if ranks else float("inf"), bundle.host.hostname)


def _first(values):
    return next((v for v in values if v is not None), None)


def _joined(parts: Sequence[R], **values) -> R:
    """One record of the parts' type: `values` for the fields the caller computes, every other
    field joined from the parts by its kind (a tuple: every part's items in order; anything else:
    the first part's value that is not None). No field is named here, so none is dropped."""
    for f in dataclasses.fields(parts[0]):
        if f.name not in values:
            each = [getattr(part, f.name) for part in parts]
            values[f.name] = tuple(x for v in each for x in v) if isinstance(each[0], tuple) else _first(each)
    return type(parts[0])(**values)


# --- every process tagged with its node, pids kept apart ----------------------------------


def _pids_collide(nodes: list[_Node]) -> bool:
    seen: set[int] = set()
    for node in nodes:
        pids = {p.pid for p in node.bundle.job.processes}
        if seen & pids:
            return True
        seen |= pids
    return False


def _relabel(node: _Node, renumber: bool) -> Bundle:
    """The node's bundle with its host on every process and, when pids collide, pids renumbered."""
    host = node.host
    base = node.slot * PID_STRIDE if renumber else 0

    def pid(value: int | None) -> int | None:
        return value + base if value is not None and base else value

    procs = tuple(_with(p, pid=pid(p.pid), ppid=pid(p.ppid), rank_pid=pid(p.rank_pid), host=p.host or host,
                        wrappers=tuple(_with(w, pid=pid(w.pid)) for w in p.wrappers) if p.wrappers else ())
                  for p in node.bundle.job.processes)
    job = dataclasses.replace(node.bundle.job, processes=procs, launcher_pid=pid(node.bundle.job.launcher_pid))
    samples = node.bundle.samples
    if base:
        # replace(), not _with(): a Snapshot caches its index by pid, which the copy must not keep
        samples = tuple(
            dataclasses.replace(s, processes=tuple(_with(x, pid=x.pid + base) for x in s.processes),
                                gpu=_renumber_gpu(s.gpu, pid))
            for s in samples)
    exits = tuple(_with(e, pid=e.pid + base) for e in node.bundle.exits) if base else node.bundle.exits
    return dataclasses.replace(node.bundle, job=job, samples=samples, exits=exits)


def _with(obj: ProcessInfo | ProcSample | ProcessExit | GpuProcess | Wrapper, **changes):
    """`dataclasses.replace` for the plain frozen records a merge copies by the ten thousand.

    replace() calls __init__ and looks the fields up again on every call: ten times slower,
    and it was most of a 4096-rank merge. These classes have no __post_init__ nor cached
    properties, so copying their attributes is all a replace would do.
    """
    clone = object.__new__(type(obj))
    clone.__dict__.update(obj.__dict__, **changes)
    return clone


def _renumber_gpu(gpu: GpuState, pid) -> GpuState:
    if not gpu.devices:
        return gpu
    devices = tuple(dataclasses.replace(d, processes=tuple(_with(p, pid=pid(p.pid)) for p in d.processes))
                    for d in gpu.devices)
    return dataclasses.replace(gpu, devices=devices)


# --- samples laid into rounds by time ------------------------------------------------------


def _rounds(per_node: list[tuple[Snapshot, ...]]) -> tuple[Snapshot, ...]:
    """Merged snapshots: each holds at most one sample of each node, taken within one interval.

    Every node sample is used once (a repeated sample would look like a process that stopped
    moving), in its node's order; the last round holds every node's last sample, so that
    `bundle.last` shows every rank, whenever each node stopped sampling.
    """
    events = sorted((snap.time, node, i) for node, snaps in enumerate(per_node) for i, snap in enumerate(snaps))
    window = _window(per_node)
    rounds: list[dict[int, int]] = []
    start = 0.0
    for time, node, i in events:
        if not rounds or node in rounds[-1] or time - start > window:
            rounds.append({})
            start = time
        rounds[-1][node] = i
    final = rounds[-1]
    for node, snaps in enumerate(per_node):
        last = len(snaps) - 1
        if final.get(node) != last:
            for members in rounds:
                if members.get(node) == last:
                    del members[node]
            final[node] = last
    return tuple(_snapshot([per_node[node][i] for node, i in sorted(members.items())])
                 for members in rounds if members)


def _window(per_node: list[tuple[Snapshot, ...]]) -> float:
    """A little less than the shortest node's sampling interval (no node samples twice in it)."""
    gaps = [statistics.median(b.time - a.time for a, b in zip(snaps, snaps[1:]))
            for snaps in per_node if len(snaps) >= 2]
    gaps = [g for g in gaps if g > 0]
    return 0.9 * min(gaps) if gaps else float("inf")


def _snapshot(parts: list[Snapshot]) -> Snapshot:
    if len(parts) == 1:
        return parts[0]
    return _joined(parts, time=max(p.time for p in parts), took_s=max(p.took_s for p in parts),
                   gpu=_gpu([p.gpu for p in parts]))     # processes: every node's


def _gpu(states: list[GpuState]) -> GpuState:
    ok = [s for s in states if s.available]
    if not ok:
        return states[0]
    # devices: every readable node's; status "ok" and the driver version, the first such node's
    return _joined(ok, errors=tuple(e for s in states for e in s.errors))


def options_of(options: list[Options]) -> Options:
    hang_after = [o.hang_after_s for o in options if o.hang_after_s is not None]
    interval = [o.interval_s for o in options if o.interval_s is not None]
    return _joined(options, interval_s=max(interval) if interval else None,
                   hang_after_s=min(hang_after) if hang_after else None,
                   native=any(o.native for o in options),
                   nonblocking=any(o.nonblocking for o in options),
                   engine="+".join(sorted({o.engine for o in options})) or "py-spy")


def exit_code_of(codes: list[int | None]) -> int | None:
    failed = [c for c in codes if c not in (None, 0)]
    if failed:
        return failed[0]
    return 0 if codes and all(c == 0 for c in codes) else None
