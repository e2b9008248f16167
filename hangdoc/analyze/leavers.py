"""Who left the common path, by evidence: each reader below looks for one kind of proof in the
ranks' own paths (their frames, loop counters and flags) and the outlines of their functions, and
names the group of ranks it proves left, or nothing. `who_left` asks them in order of strength.
Pure: a function of the bundle.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from hangdoc.analyze.logs import rank_exception
from hangdoc.base.words import rank_set
from hangdoc.model import Bundle, Frame, FrameMark, SourceBlock, SourceFunction
from hangdoc.model import SplitCause as Cause
from hangdoc.model.source import HANDLERS, JUMPS, LOOPS

# The groups of ranks in a split: (collective, the ranks of it whose stacks were read, all its ranks).
Groups = list[tuple[str, tuple[int, ...], tuple[int, ...]]]

# A branch on who the rank is: `if rank == 0:`, `if is_main_process:`, `if dist.get_rank() == 0:`.
RANKISH = re.compile(r"\b(?:\w*rank\w*|is_main\w*|is_master\w*|main_process\w*|is_global_zero|process_index|"
                      r"is_local_main\w*|is_world_process_zero|is_local_process_zero)\b", re.IGNORECASE)
# A branch on the rank's own clock: `if time.time() - last > 30:`.
_CLOCKISH = re.compile(r"\btime\.(?:time|monotonic|perf_counter)\w*\(|\bdatetime\.\w*now\(|\belapsed\w*|"
                       r"\bseconds?\b|\bdeadline\b|\b\w*_time\b|\btimer\b", re.IGNORECASE)
# A loop over the job's data: `for batch in loader:`, `for i, (x, y) in enumerate(train_dl):`.
_DATA_LOOP = re.compile(r"\bfor\b.*\bin\b.*(?:load|batch|data|dl\b|iter|sampler|shard)", re.IGNORECASE)
NAME = re.compile(r"[A-Za-z_]\w*")
STEP_NAMES = ("step", "global_step", "iteration", "it", "i", "batch_idx", "epoch")


@dataclass(frozen=True)
class OwnPath:
    rank: int
    frames: tuple[Frame, ...]              # the job's own, outermost first
    marks: tuple[FrameMark | None, ...]    # the same frames' locals, where read
    all_frames: tuple[Frame, ...]          # every frame, innermost first (torch's too)


@dataclass(frozen=True)
class Leaver:
    left: tuple[int, ...]
    why: str
    cause: Cause
    at: str | None = None


class Outlines:
    def __init__(self, functions: tuple[SourceFunction, ...]):
        self._by = {}
        for fn in functions:
            self._by.setdefault((fn.filename, fn.name), []).append(fn)

    def of(self, frame: Frame) -> SourceFunction | None:
        return next((fn for fn in self._by.get((frame.filename, frame.name), ()) if fn.holds(frame.line)), None)


def own_paths(bundle: Bundle, wanted: set[int]) -> dict[int, OwnPath]:
    """Each rank's main thread at the last sample that read its stack."""
    pids = {p.pid: p.rank for p in bundle.job.ranks if p.rank in wanted}
    found: dict[int, OwnPath] = {}
    for snapshot in reversed(bundle.samples):
        for sample in snapshot.processes:
            rank = pids.get(sample.pid)
            if rank is None or rank in found or sample.stack is None or sample.stack.probe:
                continue
            main = sample.stack.main
            if main is None or not main.frames:
                continue
            own = tuple(f for f in reversed(main.frames) if f.is_job_code)
            marks = tuple(main.loop.frames) if main.loop is not None else ()
            aligned = tuple(marks[i] if i < len(marks) and marks[i].function == f.name else None
                            for i, f in enumerate(own))
            found[rank] = OwnPath(rank, own, aligned, main.frames)
        if len(found) == len(pids):
            break
    return found


def shared_depth(ranks: list[OwnPath]) -> int:
    depth = 0
    while all(len(r.frames) > depth for r in ranks):
        keys = {(r.frames[depth].filename, r.frames[depth].name) for r in ranks}
        if len(keys) != 1:
            break
        depth += 1
    return depth


def _lines(rank: OwnPath, depth: int) -> list[Frame]:
    """The rank's own frames from the shared one down: where its path may have left."""
    return list(rank.frames[max(depth - 1, 0):])


def _blocks(rank: OwnPath, depth: int, sources: Outlines, kinds: tuple[str, ...]) -> list[tuple[Frame, SourceBlock]]:
    held = []
    for frame in _lines(rank, depth):
        fn = sources.of(frame)
        if fn is not None:
            held.extend((frame, b) for b in fn.around(frame.line) if b.kind in kinds)
    return held


def _at(frame: Frame, block: SourceBlock) -> str:
    return f"{frame.short_filename}:{block.line} `{block.text}`"


def _unique(by_group, test) -> tuple[int, object] | None:
    """The one group for which `test(group's ranks)` holds something and every other group nothing."""
    hits = []
    for index, (_, present, _) in enumerate(by_group):
        value = test(present)
        if value:
            hits.append((index, value))
    return hits[0] if len(hits) == 1 else None


def _in_handler(by_group, ranks, depth, sources) -> Leaver | None:
    def handler(present):
        held = [_blocks(ranks[r], depth, sources, HANDLERS) for r in present]
        return held[0][-1] if held and all(held) else None
    hit = _unique(by_group, handler)
    if hit is None:
        return None
    index, (frame, block) = hit
    _, present, members = by_group[index]
    word = "an `except`" if block.kind == "except" else "a `finally`"
    return Leaver(members, f"{rank_set(members)} stand{'s' if len(members) == 1 else ''} in "
                  f"{word} block its peers are not in ({_at(frame, block)}), and runs a collective there",
                  Cause.HANDLER_COLLECTIVE, _at(frame, block))


def _ahead(by_group, ranks, depth, differ: set[str]) -> Leaver | None:
    """One group ahead of all the others in the shared frame's loop counters (`differ`: the names
    whose values differ between the ranks)."""
    if not depth:
        return None
    counters: list[dict[str, int]] = []
    for _, present, _ in by_group:
        values = [dict(m.counters) if (m := ranks[r].marks[depth - 1] if depth - 1 < len(ranks[r].marks) else None)
                  else None for r in present]
        if any(v is None for v in values) or any(v != values[0] for v in values):
            return None        # no counters, or the group's own ranks differ: no clean reading
        counters.append(values[0])
    names = set.intersection(*(set(c) for c in counters)) if counters else set()
    ahead = sorted((n for n in names & differ if len({c[n] for c in counters}) > 1),
                   key=lambda n: (n not in STEP_NAMES, n))
    if not ahead:
        return None
    leads = {max(range(len(counters)), key=lambda i, n=n: counters[i][n]) for n in ahead}
    if len(leads) != 1:
        return None
    lead = leads.pop()
    if any(counters[lead][n] <= counters[i][n] for n in ahead for i in range(len(counters)) if i != lead):
        return None
    _, present, members = by_group[lead]
    others = [m for i, (_, _, ms) in enumerate(by_group) if i != lead for m in ms]
    shown = ", ".join(f"{n} {counters[lead][n]} against {', '.join(str(c[n]) for i, c in enumerate(counters) if i != lead)}"
                      for n in ahead[:2])
    return Leaver(members, f"{rank_set(members)} {'is' if len(members) == 1 else 'are'} ahead in "
                  f"the loop ({shown} on {rank_set(others)}): {'it' if len(members) == 1 else 'they'} "
                  "skipped the collective the others wait in", Cause.SKIPPED)


def _swallowed(by_group, ranks, depth, sources, ahead: Leaver | None) -> Leaver | None:
    """The others wait in a collective inside a `try` whose handler swallows the exception
    (continue, pass, break, return; no raise), and one group is ahead in the loop: an exception
    on its ranks skipped the collective."""
    if ahead is None:
        return None
    for _, present, members in by_group:
        if set(members) == set(ahead.left):
            continue
        rank = ranks[present[0]]
        for frame in _lines(rank, depth):
            fn = sources.of(frame)
            if fn is None:
                continue
            for block in fn.around(frame.line):
                if block.kind != "try":
                    continue
                handler = _swallowing_handler(fn, block)
                if handler is not None:
                    return Leaver(ahead.left, ahead.why + f"; the collective they wait in sits in a `try` whose "
                                  f"handler swallows the exception ({_at(frame, handler)})",
                                  Cause.SWALLOWED_EXCEPTION, _at(frame, handler))
    return None


def _swallowing_handler(fn: SourceFunction, block: SourceBlock) -> SourceBlock | None:
    """The first `except` of the `try` at `block` that does not raise again."""
    after = [b for b in fn.blocks if b.line > block.end]
    for handler in after:
        if handler.kind != "except":
            if handler.kind not in JUMPS and handler.kind not in ("if", "else", "for", "while", "with"):
                break
            continue
        if handler.line != block.end + 1 and not _follows(fn, block, handler):
            break
        raises = any(b.kind == "raise" and handler.holds(b.line) for b in fn.blocks)
        return None if raises else handler
    return None


def _follows(fn: SourceFunction, block: SourceBlock, handler: SourceBlock) -> bool:
    """The handler belongs to the `try` at `block`: no statement of the function lies between them
    at the try's level (what the outline shows of it: nothing but the try's own blocks)."""
    between = [b for b in fn.blocks if block.end < b.line < handler.line]
    return all(any(h.kind == "except" and h.holds(b.line) for h in fn.blocks) for b in between)


def _after_loop(by_group, ranks, depth, sources, differ: set[str]) -> Leaver | None:
    """One group after a loop of the shared function that every other group is still inside: the
    outermost loop the others are in and it is not (the one it left)."""
    if depth == 0:
        return None
    for i, (_, present, members) in enumerate(by_group):
        frame = ranks[present[0]].frames[depth - 1]
        fn = sources.of(frame)
        if fn is None:
            return None
        mine = {b.line for b in fn.around(frame.line) if b.kind in LOOPS}
        inside: set[int] | None = None
        for j, (_, others, _) in enumerate(by_group):
            if j == i:
                continue
            for r in others:
                theirs = {b.line for b in fn.around(ranks[r].frames[depth - 1].line) if b.kind in LOOPS}
                inside = theirs if inside is None else inside & theirs
        left_loops = [b for b in fn.blocks if b.kind in LOOPS and b.line in (inside or set()) - mine]
        if not left_loops:
            continue
        loop = left_loops[0]                      # the outermost: blocks are in source order
        if any(ranks[r].frames[depth - 1].line <= loop.end for r in present):
            continue                              # before the loop, not after it
        exits = [b for b in fn.blocks if loop.holds(b.line) and
                 (b.kind == "return" or (b.kind == "break" and _innermost_loop(fn, b.line) == loop.line))]
        word = f"{rank_set(members)}"
        where = f"{frame.short_filename}:{loop.line} (`{loop.text}`)"
        data = _DATA_LOOP.search(loop.text) is not None
        for exit_ in exits:
            guard = next((b for b in reversed(fn.around(exit_.line)) if b.kind in ("if", "else")), None)
            if guard is None:
                continue
            # A guard whose values differ between the leaver and the others sent it out; on a loop
            # over the data, a guard on values that do not differ was not what ended it.
            split = differ & set(NAME.findall(guard.text))
            clock = _CLOCKISH.search(guard.text) is not None
            if split or clock or not data:
                at = _at(frame, guard)
                shown = f" ({', '.join(sorted(split))} differ{'s' if len(split) == 1 else ''} between the ranks)" if split else ""
                return Leaver(members, f"{word} left the loop at {where} that the others are still in, at "
                              f"{at}{shown}", Cause.CLOCK_DECISION if clock else Cause.OWN_DECISION, at)
        why = (f"{word} finished the loop at {where} that the others are still in"
               + ((": no break of it was taken (the values its guards read are the same on every rank), so its data "
                   "ran out first" if exits else ": it has no break, so its data ran out first") if data else ""))
        return Leaver(members, why, Cause.UNEVEN_DATA if data else Cause.SKIPPED, f"{frame.short_filename}:{loop.line} `{loop.text}`")
    return None


def _innermost_loop(fn: SourceFunction, line: int) -> int | None:
    loops = [b for b in fn.around(line) if b.kind in LOOPS]
    return loops[-1].line if loops else None


def _in_branch(by_group, ranks, depth, sources) -> Leaver | None:
    """One group inside an `if` (or `else`) of the code they share that no other group is in."""
    def branches(present):
        keys = None
        for r in present:
            mine = {(frame.filename, b.line): (frame, b) for frame, b in _blocks(ranks[r], depth, sources, ("if", "else"))}
            keys = mine if keys is None else {k: v for k, v in mine.items() if k in keys}
        return keys or {}
    held = [branches(present) for _, present, _ in by_group]
    own = []
    for i, mine in enumerate(held):
        others = set().union(*(set(h) for j, h in enumerate(held) if j != i))
        alone = [v for k, v in mine.items() if k not in others]
        own.append(alone)
    hits = [i for i, alone in enumerate(own) if alone]
    if len(hits) != 1:
        return None
    index = hits[0]
    _, present, members = by_group[index]
    frame, block = own[index][-1]
    rankish = next(((f, b) for f, b in own[index] if RANKISH.search(b.text)), None)
    clockish = next(((f, b) for f, b in own[index] if _CLOCKISH.search(b.text)), None)
    if rankish is not None:
        frame, block = rankish
        cause = Cause.RANK_BRANCH
    elif clockish is not None:
        frame, block = clockish
        cause = Cause.CLOCK_DECISION
    else:
        cause = Cause.OWN_DECISION
    word = f"{rank_set(members)}"
    return Leaver(members, f"{word} took a branch its peers did not ({_at(frame, block)}) and runs a collective in it",
                  cause, _at(frame, block))


def _returned_early(by_group, ranks, depth, sources, ahead: Leaver | None) -> Leaver | None:
    """One group past a call of the shared function that every other group is still inside, where
    the called function returns early on a condition before the line the others stand at."""
    if depth == 0:
        return None
    lines = {i: ranks[present[0]].frames[depth - 1].line for i, (_, present, _) in enumerate(by_group)}
    deeper = {i: len(ranks[present[0]].frames) > depth for i, (_, present, _) in enumerate(by_group)}
    for i, (_, present, members) in enumerate(by_group):
        others = [j for j in lines if j != i]
        went_round = ahead is not None and set(ahead.left) == set(members)
        if not all(deeper[j] and (lines[j] < lines[i] or went_round) for j in others):
            continue
        if len({lines[j] for j in others}) != 1:
            continue
        inside = ranks[by_group[others[0]][1][0]].frames[depth]
        fn = sources.of(inside)
        if fn is None:
            continue
        returns = [b for b in fn.blocks if b.kind == "return" and b.line < inside.line]
        for ret in returns:
            guard = next((b for b in reversed(fn.around(ret.line)) if b.kind in ("if", "else")), None)
            if guard is None:
                continue
            at = f"{inside.short_filename}:{ret.line} `{ret.text}` (under `{guard.text}`)"
            word = f"{rank_set(members)}"
            past = "went on past" if not went_round else "went round the loop past"
            return Leaver(members, f"{word} {past} {inside.name} ({inside.short_filename}) while the others are still "
                          f"inside it, in a collective that function returns early before, at {at}", Cause.EARLY_RETURN, at)
    return None


def _printed(by_group, bundle: Bundle) -> Leaver | None:
    def raised(present):
        return all(rank_exception(bundle.logs, r) is not None for r in present)
    hit = _unique(by_group, raised)
    if hit is None:
        return None
    _, present, members = by_group[hit[0]]
    error = rank_exception(bundle.logs, present[0])
    what = error.messages[-1] if error is not None and error.messages else "an exception"
    return Leaver(members, f"only {rank_set(members)} printed an exception ({what})",
                  Cause.SKIPPED)


def _majority(by_group) -> Leaver | None:
    """Three or more ranks, one collective holding more than half of them: the others left. The
    weakest reading, said as such; two ranks never split this way (a coin toss)."""
    sizes = [len(members) for _, _, members in by_group]
    total = sum(sizes)
    big = max(range(len(sizes)), key=lambda i: sizes[i])
    if total < 3 or sizes[big] * 2 <= total:
        return None
    left = tuple(sorted(r for i, (_, _, members) in enumerate(by_group) if i != big for r in members))
    return Leaver(left, f"by count alone: {sizes[big]} of {total} ranks wait in {by_group[big][0]}; nothing in "
                  f"the code of {rank_set(left)} tells why {'it' if len(left) == 1 else 'they'} left",
                  Cause.UNKNOWN)


def shared_values(ranks: dict[int, OwnPath], depth: int) -> dict[str, dict[int, str]]:
    """The shared frame's counters and shown values by name and rank, less the rank's own number
    (a `rank` local differs between ranks by nature, and says nothing of why they parted)."""
    values: dict[str, dict[int, str]] = {}
    if not depth:
        return values
    for r, rank in ranks.items():
        mark = rank.marks[depth - 1] if depth - 1 < len(rank.marks) else None
        if mark is None:
            continue
        for name, value in (*((n, str(v)) for n, v in mark.counters), *mark.values):
            values.setdefault(name, {})[r] = value
    return {name: by_rank for name, by_rank in values.items()
            if not all(value == str(r) for r, value in by_rank.items()) and not any(_clock(v) for v in by_rank.values())}


def _clock(value: str) -> bool:
    """A number the size of a Unix time: a timestamp, which differs between ranks by nature."""
    try:
        return abs(float(value)) > 1e8
    except ValueError:
        return False


def differing_names(ranks: dict[int, OwnPath], depth: int) -> set[str]:
    return {name for name, by_rank in shared_values(ranks, depth).items() if len(set(by_rank.values())) > 1}


def who_left(by_group: Groups, ranks: dict[int, OwnPath], depth: int, sources: Outlines,
             bundle: Bundle) -> Leaver | None:
    """The ranks that left, and the evidence: the strongest reading that names one group."""
    differ = differing_names(ranks, depth)
    ahead = _ahead(by_group, ranks, depth, differ)
    return (_in_handler(by_group, ranks, depth, sources)
            or _swallowed(by_group, ranks, depth, sources, ahead)
            or _after_loop(by_group, ranks, depth, sources, differ)
            or _returned_early(by_group, ranks, depth, sources, ahead)
            or _in_branch(by_group, ranks, depth, sources)
            or ahead
            or _printed(by_group, bundle)
            or _majority(by_group))
