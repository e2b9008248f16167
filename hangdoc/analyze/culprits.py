"""Whom the ranks wait for, read from their digests (one node's, or every node's of a job): the
ranks outside the collective the others wait in, the ranks those in process-group setup wait
for, the collectives a mismatch splits them into, and the ranks apart from the largest class
standing at one line. A job of a million ranks is read in a few passes over its digests, each
making no call a rank, and what two of them need (where the ranks wait, who spins there) once."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from hangdoc.analyze.gpu import GPU_WORK
from hangdoc.analyze.past import gone_at
from hangdoc.analyze.rendezvous import not_joined
from hangdoc.model import RankDigest, RankState

# Read once: looking an enum's member up costs a pass over a million ranks a tenth of a second.
_COLLECTIVE, _COMPUTE = RankState.COLLECTIVE, RankState.COMPUTE


def wait_spots(ranks: Sequence[RankDigest]) -> dict[str, str | None]:
    """The places where ranks wait in a collective, and the wait each names."""
    return {r.place: r.detail for r in ranks if r.state == _COLLECTIVE and r.place and r.exited_at is None}


def spinning_at_waits(ranks: Sequence[RankDigest], spots: dict[str, str | None]) -> tuple[int, ...]:
    """Ranks computing, held, at a place where another rank waits in a collective (`wait_spots`):
    a spin line a native probe explained for one of them waits there for all of them."""
    return tuple(sorted(r.rank for r in ranks if r.state == _COMPUTE and r.rank is not None
                        and r.place in spots and r.held_since is not None and r.exited_at is None
                        and not str(r.detail or "").startswith(GPU_WORK)))


def culprits_of(ranks: Sequence[RankDigest], spots: dict[str, str | None],
                spinning: tuple[int, ...]) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
    """(culprits, mismatch: collective -> ranks) of ranks that wait where `spots` says, `spinning`
    at those places."""
    # Ranks in process-group setup wait for every rank to join: the ones that have not are the
    # culprits, present or not. Beside ranks in a collective (a new_group), setup is one more
    # collective to match.
    if not any(r.exited_at is None and r.state == _COLLECTIVE for r in ranks):
        late = not_joined(ranks)
        if late:
            return late, {}
    spun = set(spinning)
    waiting: list[RankDigest] = []
    others: list[RankDigest] = []
    for r in ranks:
        (waiting if r.state == _COLLECTIVE or r.joining or r.rank in spun else others).append(r)
    if others and waiting:
        return tuple(sorted(r.rank for r in others if r.rank is not None)), {}
    groups: dict[str, list[int]] = defaultdict(list)
    for rank in waiting:
        wait = rank.detail if rank.state == _COLLECTIVE else spots.get(rank.place)
        groups[rank.joining or wait or "?"].append(rank.rank)
    if len(groups) < 2:
        return (), {}
    mismatch = {name: tuple(sorted(r)) for name, r in groups.items()}

    # Who left is for the evidence to tell (analyze/divergence.py reads the ranks' own code): here,
    # only a count that is no coin toss names them, three ranks or more with one collective holding
    # more than half. Never a preference for one collective over another.
    sizes = sorted((len(ranks) for ranks in groups.values()), reverse=True)
    if sum(sizes) < 3 or sizes[0] * 2 <= sum(sizes):
        return (), mismatch
    common = max(groups.items(), key=lambda item: len(item[1]))[0]
    culprits = sorted(r for name, ranks in groups.items() if name != common for r in ranks)
    return tuple(culprits), mismatch


def outliers(ranks: Sequence[RankDigest]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Where no rank is in a known collective, the structure tells: the largest class of ranks
    standing at one line (a host spinning at its sync while a collective sits on the GPU stream)
    waits; the ranks apart from it (on their data, a lock, a child) are the culprits. One class
    alone names none. Returns (culprits, the ranks of that class that spin at their line)."""
    classes: dict[tuple, list[RankDigest]] = defaultdict(list)
    for rank in ranks:
        if gone_at(rank) is None:
            classes[_class_key(rank)].append(rank)
    standing = [key for key in classes if key[0] == _STANDING]
    if not standing:
        return (), ()
    common = max(standing, key=lambda key: len(classes[key]))
    spinning = tuple(sorted(r.rank for r in classes[common] if r.state == RankState.COMPUTE and r.rank is not None))
    if len(classes) < 2:
        return (), spinning
    return tuple(sorted(r.rank for key, members in classes.items() if key != common
                        for r in members if r.rank is not None)), spinning


_STANDING = "standing"


def _class_key(rank: RankDigest) -> tuple:
    """Ranks computing or waiting at one place are one class, whether a native probe taught hangdoc
    what one of them waits on or not, and whichever frame of a spin line their samples caught."""
    if rank.state in (RankState.COMPUTE, RankState.COLLECTIVE):
        return _STANDING, rank.place or rank.top_frame
    return rank.state, rank.top_frame
