"""Millions of acyclic objects made at once (a job's bundles read, a million ranks folded): the
cyclic collector kept from walking them again and again while they are made. Reference counting
still frees them; nothing they hold is a cycle."""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_cycle_walks() -> Iterator[None]:
    """The cyclic collector off while the block runs, as it was after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
