"""An answer worked out once per object: a function of one object alone, asked of the same object by
several readers (the diagnosis, the report's facts, the rules), remembers its answer for the last
object it was asked of, by identity. The object is held while remembered, so its id is not reused."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

A = TypeVar("A")
T = TypeVar("T")


def per_last(work: Callable[[A], T]) -> Callable[[A], T]:
    """`work(obj)`, remembered for the last `obj` it was asked of."""
    kept: list = [None, None]    # the object, its answer

    @functools.wraps(work)
    def once(obj: A) -> T:
        if kept[0] is not obj:
            kept[:] = [obj, work(obj)]
        return kept[1]
    return once
