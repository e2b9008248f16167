"""A program a launcher runs a rank under: a shell (`torchrun --no-python wrap.sh`), `timeout`,
conda's `run`. The rank is the Python process below it; `ProcessInfo.wrappers` keeps them,
outermost first, the last the rank's parent (empty: none, or a bundle saved before they were read)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Wrapper:
    """One wrapper over a rank, as read when the rank was found."""

    pid: int
    cmdline: tuple[str, ...]       # redacted
