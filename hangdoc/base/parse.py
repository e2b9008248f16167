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
