"""A merge drops no field of the model: every field of every record in two nodes' bundles (the
snapshots, the job, the processes, the GPUs, the options, the logs, the Flight Recorder and RAS
records, the exits) is set to a value of its own that is not its default, derived from the
dataclasses' fields and their types, so a field added to the model is covered without a change
here; after the merge no field holds its default, and the records the merge copies equal the
originals but for what it must change (pids renumbered, log sources named by host).
"""
from __future__ import annotations

import dataclasses
import enum
import itertools
import types
import typing
from collections.abc import Iterator

from hangdoc.bundle.merge import merge_bundles
from hangdoc.model import PID_STRIDE, Bundle, Role

# A field a merge cannot show with any other value than its default, and why.
ALWAYS_DEFAULT = {
    ("Job", "single_process"): "a merge refuses --single captures: only distributed jobs' nodes merge",
}


def filled(cls: type, counter: Iterator[int]):
    """`cls` with every field set, recursively, to a value distinct from the others and from its default."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: value_of(hints[f.name], f, f"{cls.__name__}.{f.name}", counter)
                  for f in dataclasses.fields(cls)})


def value_of(tp, f: dataclasses.Field | None, name: str, counter: Iterator[int]):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    default = f.default if f is not None else dataclasses.MISSING
    if origin in (typing.Union, types.UnionType):
        return value_of(next(a for a in args if a is not type(None)), f, name, counter)
    if origin is tuple:
        items = [args[0]] if len(args) == 2 and args[1] is Ellipsis else list(args)
        return tuple(value_of(a, None, name, counter) for a in items)
    if origin is dict:
        return {value_of(args[0], None, name, counter): value_of(args[1], None, name, counter)}
    if dataclasses.is_dataclass(tp):
        return filled(tp, counter)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(m for m in reversed(list(tp)) if m is not default)
    if tp is bool:
        return default is not True
    if tp is int:
        return next(counter)
    if tp is float:
        return next(counter) + 0.25
    if tp is str:
        return f"{name}-{next(counter)}"
    raise TypeError(f"{name}: no value for {tp!r}; teach value_of this type")


def two_nodes() -> tuple[Bundle, Bundle]:
    """Two nodes of one job, every field filled: one rank each, the same pids (so the merge
    renumbers node 1's), readable GPUs, two samples a second apart (two rounds of both nodes)."""
    node = filled(Bundle, itertools.count(1))
    [proc] = node.job.processes
    [snap] = node.samples
    node = dataclasses.replace(
        node, job=dataclasses.replace(node.job, single_process=False,
                                      processes=(dataclasses.replace(proc, role=Role.RANK, rank=0),)),
        samples=(dataclasses.replace(snap, gpu=dataclasses.replace(snap.gpu, status="ok")),))
    node = dataclasses.replace(node, samples=node.samples + (dataclasses.replace(node.samples[0],
                                                                                  time=node.samples[0].time + 1.0),))
    other = dataclasses.replace(
        node, host=dataclasses.replace(node.host, hostname="node-b"),
        job=dataclasses.replace(node.job, processes=(dataclasses.replace(proc, role=Role.RANK, rank=1),)))
    return node, other


def defaults_held(record, where: str = "bundle") -> list[str]:
    """Every field of `record` and the records inside it that holds its default, by path."""
    found = []
    if dataclasses.is_dataclass(record):
        for f in dataclasses.fields(record):
            value = getattr(record, f.name)
            default = (f.default if f.default is not dataclasses.MISSING
                       else f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
            if value == default and (type(record).__name__, f.name) not in ALWAYS_DEFAULT:
                found.append(f"{where}.{f.name} ({type(record).__name__}.{f.name}) holds its default {default!r}")
            found += defaults_held(value, f"{where}.{f.name}")
    elif isinstance(record, tuple):
        for i, item in enumerate(record):
            found += defaults_held(item, f"{where}[{i}]")
    return found


def moved(record, **changes):
    return dataclasses.replace(record, **changes)


def test_the_filled_nodes_hold_no_default_so_the_check_can_see_a_dropped_field():
    # GIVEN two nodes' bundles filled from the model's fields
    node, other = two_nodes()
    # THEN no field of either holds its default (but those no merge can show otherwise)
    assert defaults_held(node) == [] and defaults_held(other) == []


def test_a_merge_keeps_every_field_of_every_record():
    # GIVEN two nodes of one job, every field of every record set to its own non-default value
    node, other = two_nodes()
    # WHEN merged
    merged = merge_bundles([node, other], ["a.json", "b.json"])
    # THEN no field fell back to its default anywhere in the merged bundle
    assert defaults_held(merged) == []
    # AND each round's snapshot is both nodes' samples, node 1's pids renumbered, every other field kept
    stride = PID_STRIDE

    def renumbered_gpu(gpu):
        return moved(gpu, devices=tuple(moved(d, processes=tuple(moved(p, pid=p.pid + stride) for p in d.processes))
                                        for d in gpu.devices))

    for merged_snap, a, b in zip(merged.samples, node.samples, other.samples, strict=True):
        b_gpu = renumbered_gpu(b.gpu)
        assert merged_snap == moved(a, processes=a.processes + tuple(moved(x, pid=x.pid + stride) for x in b.processes),
                                    gpu=moved(a.gpu, devices=a.gpu.devices + b_gpu.devices,
                                              errors=a.gpu.errors + b.gpu.errors))
    # AND the job's processes, exits, logs and Flight Recorder records are each node's, whole
    [p0], [p1] = node.job.processes, other.job.processes
    assert merged.job == moved(node.job, launcher_pid=None, processes=(
        p0, moved(p1, pid=p1.pid + stride, ppid=p1.ppid + stride, rank_pid=p1.rank_pid + stride,
                  wrappers=tuple(moved(w, pid=w.pid + stride) for w in p1.wrappers))))
    assert merged.exits == node.exits + tuple(moved(e, pid=e.pid + stride) for e in other.exits)
    assert merged.logs == tuple(moved(log, source=f"{b.host.hostname}:{log.source}")
                                for b in (node, other) for log in b.logs)
    assert merged.flight_records == node.flight_records + other.flight_records
    assert merged.flight_config == node.flight_config + other.flight_config
    assert (merged.host, merged.hangdoc_version, merged.ras) == (node.host, node.hangdoc_version, node.ras)
