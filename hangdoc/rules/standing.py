"""Where a generic finding stands back for a specific one: which rule before it explains a rank, and
the fix that points at that rule's (collective-straggler, no-progress)."""
from __future__ import annotations

from hangdoc.model import Cause
from hangdoc.rules.base import Context


# The kinds of cause a generic finding stands back for, the most specific first, with what the
# rank is held by in each: a new kind is a line here.
HELD_BY = (
    ((Cause.PROCESS,), "the state of its process (it runs no code at all), not by its code, its data or its "
                       "share of the work"),
    ((Cause.OWN_CODE,), "its own code, not by its data or its share of the work"),
    ((Cause.DATA, Cause.WORKERS), "its DataLoader, not by its share of the work"),
)


EVERY_KIND = tuple(kind for kinds, _ in HELD_BY for kind in kinds)


def held(ctx: Context, ranks, kinds: tuple[Cause, ...] = EVERY_KIND) -> str | None:
    """The fix of a generic finding about `ranks` where a rule before it names what holds one of
    them (of the `kinds` of cause it reads): that rule's, by name; None where none does."""
    for causes, by in HELD_BY:
        named = {rank: slug for cause in causes if cause in kinds for rank, slug in ctx.explained(cause).items()}
        if named.keys() & set(ranks):
            return stand_back(ranks, named, by)
    return None


def stand_back(ranks, causes: dict[int, str], by: str) -> str:
    """The fix of a generic finding whose ranks a specific rule explains: that rule's, by name."""
    slugs = list(dict.fromkeys(causes[r] for r in ranks if r in causes))
    named = [str(r) for r in ranks if r in causes]
    who = f"Rank {named[0]} is" if len(named) == 1 else f"Ranks {', '.join(named)} are"
    return (f"{who} held by {by}: follow the fix "
            f"of the {' and '.join(slugs)} finding above; the ranks waiting for it need no change.")
