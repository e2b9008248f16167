"""The compact bundle, `hangdoc/bundle-v2`: every distinct frame and stack stored once.

A node's bundle holds the same few stacks thousands of times (every rank in all_reduce, every
worker idle on its queue, sample after sample). v2 keeps a table of frames, a table of stacks
whose threads name their frames by id, and samples that name their stack by id; the JSON is
then zstd-compressed. Everything else is v1's JSON as it is, so a field added to the model
flows through both without a change here: only Frame and Stack interning is special.

    {"schema": "hangdoc/bundle-v2", "order": "head-first",
     "digest": {... optional: the node's own reading of its ranks, see NodeDigest ...},
     "bundle": {... v1 fields, each sample's process "stack": a stack id or null ...},
     "frames": [{"name": ..., "filename": ..., ...}, ...],
     "stacks": [{"threads": [{"tid": ..., "frames": [0, 1, 2]}, ...], ...}, ...]}

`decode_head` decodes the digest and the few bundle fields a merge of thousands of nodes needs
(host, job identity, logs, exit code) and skips the samples: a node is then a few hundred
bytes of Python objects instead of tens of thousands. `encode` writes those first ("order":
"head-first": the digest, the bundle's small fields, the job's identity; then the job's
processes, the samples and the tables), so a node's head is a prefix of its JSON, read without
decompressing or parsing the rest (`head_of_prefix`); a document without that order (an older
hangdoc's) is read whole, as before. The keys' order is all that changed: every reader reads both.

Decoding shares one `Interner` across a job's node bundles, so a merge of thousands of
nodes holds each distinct frame and frame tuple once.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

import msgspec

from hangdoc.model import (
    Bundle, Frame, Host, LogTail, NodeDigest, Options, ProcSample, Snapshot, Stack, Thread,
)
from hangdoc.base.redact import redact_cached
from hangdoc.base.serde import to_dict

SCHEMA = "hangdoc/bundle-v2"
_encoder = msgspec.json.Encoder()


# --- writing -----------------------------------------------------------------------------


class _Tables:
    def __init__(self):
        self.frames: dict[Frame, int] = {}
        self.stacks: dict[Stack, int] = {}
        self.stack_rows: list[dict] = []
        self._tuples: dict[int, tuple[tuple[Frame, ...], list[int]]] = {}

    def frame_ids(self, frames: tuple[Frame, ...]) -> list[int]:
        # One frames tuple is usually shared by many threads: look it up by identity first.
        hit = self._tuples.get(id(frames))
        if hit is not None and hit[0] is frames:
            return hit[1]
        ids = [self.frames.setdefault(f, len(self.frames)) for f in frames]
        self._tuples[id(frames)] = (frames, ids)
        return ids

    def stack_id(self, stack: Stack | None) -> int | None:
        if stack is None:
            return None
        found = self.stacks.get(stack)
        if found is None:
            row = to_dict(dataclasses.replace(stack, threads=()))
            row["threads"] = []
            for thread in stack.threads:
                item = to_dict(dataclasses.replace(thread, frames=()))
                item["frames"] = self.frame_ids(thread.frames)
                row["threads"].append(item)
            found = self.stacks[stack] = len(self.stack_rows)
            self.stack_rows.append(row)
        return found


# What a merge reads of each node comes first; what only a whole read needs comes after.
_BUNDLE_LATE = ("job", "samples", "data_lists", "flight_records", "flight_config", "flight_errors", "ras", "exits",
                "sources", "set_aside")
HEAD_FIRST = "head-first"          # the document's "order": its head comes first, up to HEAD_END
_HEAD_CLOSE = b"}}}"              # closes the head: the job, the bundle, the document
HEAD_END = b',"processes":'      # what follows the head (no JSON string can hold these bytes unescaped)


def encode(bundle: Bundle, digest: NodeDigest | None = None) -> bytes:
    """The v2 JSON of a bundle (not yet compressed), with its node's digest when given.

    The head comes first: the schema, the digest, the bundle's fields but the late ones, the job's
    but its processes; then the processes, the samples and the tables. A merge of thousands of
    nodes decompresses and parses a node's head alone (`head_of_prefix`)."""
    tables = _Tables()
    body = to_dict(dataclasses.replace(bundle, samples=()))
    samples = []
    for snap in bundle.samples:
        row = to_dict(dataclasses.replace(snap, processes=()))
        procs = []
        for sample in snap.processes:
            item = to_dict(dataclasses.replace(sample, stack=None))
            item["stack"] = tables.stack_id(sample.stack)
            for opened in (item.get("proc") or {}).get("open_files") or ():
                opened["path"] = redact_cached(opened["path"])    # a path may hold a token
            procs.append(item)
        row["processes"] = procs
        samples.append(row)
    body["samples"] = samples
    job = body.pop("job")
    processes = job.pop("processes")
    head = {"schema": SCHEMA, "order": HEAD_FIRST}
    if digest is not None:
        head["digest"] = msgspec.to_builtins(digest)
    head["bundle"] = {**{k: v for k, v in body.items() if k not in _BUNDLE_LATE}, "job": job}
    late = {k: body[k] for k in _BUNDLE_LATE if k in body}
    # Each piece is encoded whole and its outer braces cut: no JSON is assembled by hand.
    first = _encoder.encode(head)
    return (first[:-len(_HEAD_CLOSE)] + HEAD_END + _encoder.encode(processes) + b"}," + _encoder.encode(late)[1:]
            + b"," + _encoder.encode({"frames": list(tables.frames), "stacks": tables.stack_rows})[1:])


# --- reading -------------------------------------------------------------------------------


class _IdMeta(type):
    def __instancecheck__(cls, obj):     # msgspec checks what a dec_hook returns against the type
        return isinstance(obj, cls.stands_for)


class _StackRef(metaclass=_IdMeta):
    """In the mirror types: a stack id, resolved to the Stack by the decoder's hook."""
    stands_for = Stack


class _FramesRef(metaclass=_IdMeta):
    """In the mirror types: a thread's frame ids, resolved to a tuple of Frames."""
    stands_for = tuple


def _replace_types(tp: Any, swap: dict) -> Any:
    """`tp` with every type in `swap` replaced, inside Optional, tuple, dict and the like."""
    if tp in swap:
        return swap[tp]
    origin = typing.get_origin(tp)
    if origin is None:
        return tp
    args = tuple(_replace_types(a, swap) for a in typing.get_args(tp))
    if origin is typing.Union or type(tp).__name__ == "UnionType":
        return typing.Union[args]
    return origin[args]


@functools.lru_cache(maxsize=None)
def _mirrors() -> dict[type, type]:
    """Model type -> a subclass that decodes the v2 shape (generic over the model's other fields).

    Thread.frames and ProcSample.stack become ids; the types that hold them, up to Bundle, get
    mirrors whose annotations name the mirrors. After decoding, `_restore` gives every object
    its model class back.
    """
    seeds = {Thread: {"frames": _FramesRef}, ProcSample: {"stack": typing.Optional[_StackRef]}}
    swap: dict[type, type] = {}

    def mirror(tp: type, overrides: dict[str, Any]) -> type:
        hints = typing.get_type_hints(tp)
        ns: dict[str, Any] = {"__annotations__": {}}
        for f in dataclasses.fields(tp):
            if f.name in overrides:
                ns["__annotations__"][f.name] = overrides[f.name]
            elif _replace_types(hints[f.name], swap) != hints[f.name]:
                ns["__annotations__"][f.name] = _replace_types(hints[f.name], swap)
            else:
                continue
            if f.default is not dataclasses.MISSING:
                ns[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                ns[f.name] = dataclasses.field(default_factory=f.default_factory)
        return dataclasses.dataclass(frozen=True)(type(f"_V2{tp.__name__}", (tp,), ns))

    for tp, overrides in seeds.items():
        swap[tp] = mirror(tp, overrides)
    for tp in (Stack, Snapshot, Bundle):   # the holders of ProcSample, outermost last
        hints = typing.get_type_hints(tp)
        if any(_replace_types(h, swap) != h for h in hints.values()):
            swap[tp] = mirror(tp, {})
    return swap


@functools.lru_cache(maxsize=None)
def _restorer(tp: type):
    """A function that gives a decoded mirror object (and the mirrors inside it) its model class."""
    mirrors = _mirrors()
    back = {m: base for base, m in mirrors.items()}
    base = back[tp]
    inner = []
    for f in dataclasses.fields(tp):
        hint = typing.get_type_hints(tp)[f.name]
        for arg in _flatten(hint):
            if arg in back:
                inner.append((f.name, _restorer(arg)))
                break

    def restore(obj):
        object.__setattr__(obj, "__class__", base)
        for name, fix in inner:
            value = obj.__dict__[name]
            if type(value) is tuple:
                for item in value:
                    fix(item)
            elif value is not None:
                fix(value)
    return restore


def _flatten(hint: Any) -> list:
    args = typing.get_args(hint)
    return [hint] + [x for a in args for x in _flatten(a)]


class Interner:
    """Canonical frames and frame tuples shared by every bundle one process decodes."""

    def __init__(self):
        self.frames: dict[Frame, Frame] = {}
        self.tuples: dict[tuple[int, ...], tuple[Frame, ...]] = {}

    def frame(self, frame: Frame) -> Frame:
        return self.frames.setdefault(frame, frame)

    def frame_tuple(self, frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
        # Keyed by the canonical frames' identities: hashing ints, not every frame's fields.
        return self.tuples.setdefault(tuple(map(id, frames)), frames)


class _Header(msgspec.Struct, gc=False):
    schema: str
    frames: list[Frame]
    stacks: msgspec.Raw
    bundle: msgspec.Raw


def decode(data: bytes, interner: Interner | None = None) -> Bundle:
    """A Bundle from v2 JSON; ValueError naming the JSON path, msgspec.DecodeError on bad JSON."""
    interner = interner or Interner()
    try:
        header = msgspec.json.decode(data, type=_Header)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None
    frames = [interner.frame(f) for f in header.frames]
    mirrors = _mirrors()

    def frames_of(ids: Any) -> tuple[Frame, ...]:
        try:
            if min(ids, default=0) < 0:
                raise IndexError
            return interner.frame_tuple(tuple([frames[i] for i in ids]))
        except (IndexError, TypeError):
            raise ValueError(f"{ids!r} is not a list of frame ids below {len(frames)}") from None

    def hook(tp, value):
        if tp is _FramesRef:
            return frames_of(value)
        if tp is _StackRef:
            if type(value) is not int or not 0 <= value < len(stacks):
                raise ValueError(f"{value!r} is not a stack id below {len(stacks)}")
            return stacks[value]
        raise NotImplementedError(tp)

    stack_type = mirrors.get(Stack, Stack)
    try:
        stacks = msgspec.json.decode(header.stacks, type=list[stack_type], dec_hook=hook)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc).replace("`$", "`$.stacks", 1)) from None
    if stack_type is not Stack:
        restore = _restorer(stack_type)
        for stack in stacks:
            restore(stack)
    try:
        bundle = msgspec.json.decode(header.bundle, type=mirrors[Bundle], dec_hook=hook)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc).replace("`$", "`$.bundle", 1)) from None
    _restorer(mirrors[Bundle])(bundle)
    return bundle


# --- the head: what a merge by class reads of each node --------------------------------------


class _JobHead(msgspec.Struct, gc=False):
    run_id: str | None = None
    master_addr: str | None = None
    master_port: int | None = None
    world_size: int | None = None
    single_process: bool = False


class _BundleHead(msgspec.Struct, gc=False):
    host: Host
    job: _JobHead
    created: float = 0.0
    logs: tuple[LogTail, ...] = ()
    options: Options = Options()
    exit_code: int | None = None


class Head(msgspec.Struct, gc=False):
    """A node's bundle without its samples: the digest (None when the bundle has none) and
    the bundle fields a job-wide decision reads."""

    schema: Any = None
    bundle: _BundleHead | None = None
    digest: NodeDigest | None = None


_head_decoder = msgspec.json.Decoder(Head)


def decode_head(data: bytes) -> Head:
    """The head of v2 JSON; ValueError naming the JSON path."""
    try:
        return _head_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None


_HEAD_START = b'{"schema":"' + SCHEMA.encode() + b'","order":"' + HEAD_FIRST.encode() + b'",'


def head_of_prefix(data: bytes) -> Head | None:
    """The head from the JSON up to HEAD_END alone, when the document says it was written head
    first; None otherwise (an older writer's order): the caller then decodes the whole document."""
    end = data.find(HEAD_END) if data.startswith(_HEAD_START) else -1
    if end < 0:
        return None
    try:
        head = _head_decoder.decode(data[:end] + _HEAD_CLOSE)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return head if head.bundle is not None else None
