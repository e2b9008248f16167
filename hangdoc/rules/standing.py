"""Where a generic finding stands back for a specific one: which rule before it explains a rank, and
the fix that points at that rule's (collective-straggler, no-progress)."""
from __future__ import annotations

from hangdoc.model import Cause
from hangdoc.rules.base import Context


def explained_by(ctx: Context) -> dict[int, str]:
    """rank -> the slug of the rule before this one that names what holds that rank in its own
    code: for such a rank this finding stands back and points at it instead of the generic advice."""
    return ctx.explained(Cause.OWN_CODE)


def held_by_data(ctx: Context) -> dict[int, str]:
    """rank -> the slug of the rule before this one that names what holds that rank's DataLoader
    (its workers, its shards): the late rank waits for its data, and that finding's fix is the one."""
    return {**ctx.explained(Cause.DATA), **ctx.explained(Cause.WORKERS)}


def stand_back(ranks, causes: dict[int, str], by: str = "its own code, not by its data or its share of "
               "the work") -> str:
    """The fix of a generic finding whose ranks a specific rule explains: that rule's, by name."""
    slugs = list(dict.fromkeys(causes[r] for r in ranks if r in causes))
    held = [str(r) for r in ranks if r in causes]
    who = f"Rank {held[0]} is" if len(held) == 1 else f"Ranks {', '.join(held)} are"
    return (f"{who} held by {by}: follow the fix "
            f"of the {' and '.join(slugs)} finding above; the ranks waiting for it need no change.")
