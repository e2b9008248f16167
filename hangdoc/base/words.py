"""How hangdoc writes numbers, ranks, sizes and durations: said once, for every command.

The rules, `hangdoc check`, the merge and the renderers all phrase ranks and figures the same
way because they all call these. Pure functions of their arguments; no imports from hangdoc.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0,1,2,3,5,7,8] -> "0-3,5,7-8"."""
    return ",".join(_run_texts(sorted(set(ranks))))


def _run_texts(ordered: Sequence[int]) -> list[str]:
    return [str(ordered[i]) if j - i == 1 else f"{ordered[i]}-{ordered[j - 1]}" for i, j in _runs(ordered)]


RUN_SCAN = 64     # a stretch this short is scanned neighbour by neighbour, not halved


def _runs(ordered: Sequence[int]) -> list[tuple[int, int]]:
    """The runs of consecutive numbers in `ordered` (sorted, distinct) as (start, end) index pairs.

    A stretch is one run when its ends lie as far apart as its length: a class of a million ranks
    is a few runs, found by halving the stretches that are not in a few dozen steps, not by a walk
    over every neighbour (a tenth of a second a call)."""
    runs: list[tuple[int, int]] = []
    todo = [(0, len(ordered))] if ordered else []
    while todo:
        lo, hi = todo.pop()
        if ordered[hi - 1] - ordered[lo] == hi - 1 - lo:
            found = [(lo, hi)]
        elif hi - lo > RUN_SCAN:
            mid = (lo + hi) // 2
            todo += [(mid, hi), (lo, mid)]       # the lower half next: the runs come out in order
            continue
        else:
            breaks = [i for i in range(lo + 1, hi) if ordered[i] != ordered[i - 1] + 1]
            found = list(zip([lo, *breaks], [*breaks, hi]))
        if runs and ordered[runs[-1][1] - 1] + 1 == ordered[found[0][0]]:
            found[0] = (runs.pop()[0], found[0][1])    # a run that a halving cut in two
        runs += found
    return runs


def expand_ranges(text: str) -> list[int]:
    """"0-3,5" -> [0, 1, 2, 3, 5]: `rank_ranges` undone."""
    ranks: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        ranks.extend(range(int(low), int(high or low) + 1))
    return ranks


def rank_set(ranks: Iterable[int | None], limit: int = 16) -> str:
    """"rank 3" or "ranks 0-511,513-1023 (1023)"; past `limit` runs the rest is counted, not listed."""
    ranks = [r for r in ranks if r is not None and r >= 0]
    if not ranks:
        return "ranks ?"
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    ordered = sorted(set(ranks))
    parts = _run_texts(ordered)
    shown = ",".join(parts[:limit]) + (f",... (+{len(parts) - limit} runs)" if len(parts) > limit else "")
    count = len(ordered)
    return f"ranks {shown} ({count})" if count > 2 else f"ranks {shown}"


def rank_list(ranks: Sequence[int]) -> str:
    """"rank 3" or "ranks 0, 2, 5": every rank named (short lists, as `check` prints them)."""
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def rank_label(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def cut(text: str, room: int) -> str:
    """`text` if it fits in `room` characters, else its start and "…" in that room."""
    return text if len(text) <= room else text[:max(1, room - 1)] + "…"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def size(n: float) -> str:
    """Bytes in decimal units: "512 B", "4.2 kB", "55.1 MB", "1.2 GB"."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} TB"


def mb(n: float) -> str:
    """Bytes as decimal megabytes, whatever their size: "55.1 MB" (rates and offsets read alike)."""
    return f"{n / 1e6:.1f} MB"


def duration(seconds: float | None) -> str:
    """A wait in a table cell: "42s", "7m"."""
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m"


def span(seconds: float) -> str:
    """A long gap in a sentence: "25 min", "2.5 h"."""
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


# The ranks' Flight Recorder setting in words, the same in `hangdoc ps`, the live view and the
# report: "default" is TORCH_FR_BUFFER_SIZE unset, whatever the job's torch release then records.
FLIGHT_STATE_WORDS = {"default": "unset (torch's default)"}


# What each share of a rank's time is called on the headline's Time line; slow-rank's lines say the
# same shares (TimeShares.parts), so the two never count a rank's time differently.
SHARE_WORDS = {"step_wait": "waits for the others", "other_wait": "in other collectives", "data": "on data",
               "compute": "computes", "io": "I/O", "other": "other"}
ALWAYS_SAID = ("step_wait", "data", "compute")


def share_words(shares, words: dict[str, str] = SHARE_WORDS, interval: str = "({low:.0%}-{high:.0%})") -> str:
    """A rank's shares, each said once, adding up to its whole (each rounded as every other figure
    of it is, so within a point or two): the step's wait (with its interval), data and compute
    always, the others where they round above 0 ("other 7%": asleep outside those, or no stack read);
    then, apart, the share of its time its main thread waited on a run queue for a CPU, which falls
    across them."""
    low, high = shares.step_wait_interval
    said = []
    for key, share in shares.parts():
        if key in ALWAYS_SAID or f"{share:.0%}" != "0%":
            bound = " " + interval.format(low=low, high=high) if key == "step_wait" and interval else ""
            said.append(f"{words[key]} {share:.0%}{bound}")
    text = ", ".join(said)
    if shares.runqueue_said is not None:
        text += f" (waiting on a run queue for a CPU {shares.runqueue_said:.0%} of its time, across those)"
    return text


def start_name(generation: int) -> str:
    """"the first start", "restart 2": a start of the job's ranks by its launcher."""
    return "the first start" if generation == 0 else f"restart {generation}"
