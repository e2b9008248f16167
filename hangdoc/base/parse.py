"""Small parsers for values read from outside: environments, /proc, py-spy and dump JSON."""
from __future__ import annotations


def to_int(value) -> int | None:
    """`value` as an int; None when it is None, a bool, or not a number ("", "x", "1.5", a list).

    A bool is refused because JSON's true/false are no counters; for an environment string
    this is plain `int(text)`.
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def cpu_list(text: str, limit: int = 1 << 16) -> frozenset[int]:
    """The CPUs of a kernel CPU list ("0-3,8,10-11"); what does not parse, or lies past `limit`, is left out."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        first, last = to_int(low.strip()), to_int((high or low).strip())
        if first is None or last is None or not 0 <= first <= last < limit:
            continue
        cpus.update(range(first, last + 1))
    return frozenset(cpus)
