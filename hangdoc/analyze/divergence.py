"""Where ranks that wait in different collectives parted ways, and which of them left the common
path, by evidence: never by a preference for one collective, and "cannot tell" where nothing tells.

The ranks' own frames are laid side by side (the job's code, not torch's): the deepest function
they share, and the line each stands at in it. The outlines of those functions
(`collect/sources.py`) and the ranks' loop counters and flags (py-spy's locals) tell who left:

- a rank that stands in an `except` or `finally` block its peers are not in (a handler that runs
  a collective on the rank that raised);
- a rank after a loop its peers are still in (it broke out early: a decision taken on its own
  values, or its data ran out);
- a rank inside a branch its peers did not take (`if rank == 0:`, a checkpoint due by its own clock);
- a rank past a call its peers are still inside, where that function returns early on a condition;
- a rank ahead in the loop's counters: it skipped the collective the others wait in (through a
  handler that swallowed an exception, when the others' collective sits in such a `try`);
- the only ranks whose output printed an exception.

Pure: a function of the bundle and the diagnosis's views.
"""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.analyze.leavers import (
    NAME, STEP_NAMES, OwnPath, Outlines, differing_names, own_paths, shared_depth, shared_values, who_left,
)
from hangdoc.analyze.logs import rank_exception
from hangdoc.base.words import rank_set
from hangdoc.model import Bundle
from hangdoc.model import SplitCause as Cause

MAX_DIFFERING = 6
# Frames of the wrappers whose forward runs collectives of their own.
_WRAPPERS = (("torch/nn/parallel/distributed.py", "DDP"), ("torch/distributed/fsdp/", "FSDP"))


@dataclass(frozen=True)
class Place:
    """Where the ranks of one group stand: the line in the function they all share, and their own
    innermost line below it."""

    ranks: tuple[int, ...]
    wait: str                      # the collective they wait in
    line: str                      # "train.py:57", their innermost own line
    text: str | None               # that line as written, when the file could be read
    step: str | None               # the shared frame's counters: "step 61, epoch 0"


@dataclass(frozen=True)
class Divergence:
    """The split read from the ranks' own code: who left (empty: nothing tells), how we know, the
    line where its path left the others', the values that differ, the cause and its fix."""

    shared: str | None             # "train (train.py)", the deepest function every rank is in
    places: tuple[Place, ...]
    left: tuple[int, ...]          # the ranks that left the common path; () when nothing tells
    why: str                       # the evidence that names them, or why nothing does
    cause: Cause
    at: str | None = None          # "train.py:55 `except Exception: continue`": where their path left
    differing: tuple[str, ...] = ()   # "early_stop: True on rank 2, False on ranks 0-1"
    exception: str | None = None   # the exception that sent it there, when one did
    wrapper: str | None = None     # "DDP" / "FSDP": whose collective the leaver runs in its forward

    @property
    def told(self) -> bool:
        return bool(self.left)


def divergence(bundle: Bundle, groups: dict[str, tuple[int, ...]]) -> Divergence | None:
    """The split of ranks waiting in different collectives (`groups`: collective -> ranks)."""
    if len(groups) < 2:
        return None
    ranks = own_paths(bundle, {r for members in groups.values() for r in members})
    by_group = [(name, tuple(r for r in members if r in ranks), members) for name, members in sorted(groups.items())]
    sources = Outlines(bundle.sources)
    if any(not present for _, present, _ in by_group):
        return Divergence(None, _places(by_group, ranks, 0, sources), (), "the stacks of some ranks could not be read",
                          Cause.UNKNOWN)
    depth = shared_depth([ranks[r] for _, present, _ in by_group for r in present])
    shared = None
    if depth:
        frame = ranks[by_group[0][1][0]].frames[depth - 1]
        shared = f"{frame.name} ({frame.short_filename})"
    places = _places(by_group, ranks, depth, sources)
    found = who_left(by_group, ranks, depth, sources, bundle)
    differing = _differing(ranks, depth)
    if found is None:
        names = " and ".join(rank_set(p) for _, p, _ in by_group)
        return Divergence(shared, places, (), f"{names} stand in different collectives; nothing tells which left "
                          "(no loop counter ahead, no handler, branch or early exit one of them alone took)",
                          Cause.UNKNOWN, differing=differing)
    exception = _exception(found.left, ranks, depth, bundle)
    wrapper = _wrapper(found.left, ranks)
    cause = Cause.WRAPPER_ON_ONE_RANK if wrapper and found.cause == Cause.RANK_BRANCH else found.cause
    return Divergence(shared, places, found.left, found.why, cause, found.at, differing, exception, wrapper)


def _places(by_group, ranks: dict[int, OwnPath], depth: int, sources: Outlines) -> tuple[Place, ...]:
    differ = differing_names(ranks, depth)
    places = []
    for name, present, members in by_group:
        if not present:
            places.append(Place(members, name, "?", None, None))
            continue
        first = ranks[present[0]]
        own = first.frames[-1] if first.frames else None
        text = None
        if own is not None and (fn := sources.of(own)) is not None:
            text = fn.text_of(own.line)
        mark = first.marks[depth - 1] if depth and depth - 1 < len(first.marks) else None
        counters = [(k, v) for k, v in (mark.counters if mark is not None else ()) if k in differ]
        counters.sort(key=lambda kv: (kv[0] not in STEP_NAMES, kv[0]))
        step = ", ".join(f"{k} {v}" for k, v in counters[:3]) or None
        places.append(Place(members, name, f"{own.short_filename}:{own.line}" if own else "?", text, step))
    return tuple(places)


def _exception(left: tuple[int, ...], ranks: dict[int, OwnPath], depth: int, bundle: Bundle) -> str | None:
    """The exception that sent the leaver off: one its frames hold in a local, or one it printed."""
    for r in left:
        rank = ranks.get(r)
        if rank is None:
            continue
        for mark in reversed(rank.marks):
            for name, value in (mark.values if mark is not None else ()):
                if value.endswith(("Error", "Exception", "Exit", "Interrupt", "Timeout", "Warning")) and \
                        NAME.fullmatch(value.rsplit(".", 1)[-1]):
                    return f"{name}: {value}"
        error = rank_exception(bundle.logs, r)
        if error is not None and error.messages:
            return error.messages[-1]
    return None


def _wrapper(left: tuple[int, ...], ranks: dict[int, OwnPath]) -> str | None:
    for r in left:
        rank = ranks.get(r)
        for frame in rank.all_frames if rank is not None else ():
            for path, name in _WRAPPERS:
                if path in frame.filename:
                    return name
    return None


def _differing(ranks: dict[int, OwnPath], depth: int) -> tuple[str, ...]:
    """The locals of the shared frame whose values differ across ranks: flags, counters, numbers, an
    exception held; flags first."""
    shown = []
    for name, by_rank in shared_values(ranks, depth).items():
        if len(by_rank) < 2 or len(set(by_rank.values())) < 2:
            continue
        parts: dict[str, list[int]] = {}
        for r, value in sorted(by_rank.items()):
            parts.setdefault(value, []).append(r)
        flag = all(v in ("True", "False", "None") for v in parts)
        text = f"{name}: " + ", ".join(f"{v} on {rank_set(rs)}" for v, rs in parts.items())
        shown.append((0 if flag else 1, text))
    return tuple(text for _, text in sorted(shown)[:MAX_DIFFERING])
