"""One clock per report: every "how long" a report prints counts from the same onset. Pure.

A hang named from the past (analyze/past.py) dates the stall from before hangdoc's first sample;
a rank seen in one state since that first sample has been in it, as far as anyone knows, since
then too. Its "for N s" (the table's FOR column, a finding's "has not stepped for") then counts
from the report's onset, as the header's "no step for at least N s" does, not from the first
sample: one report, one clock.
"""
from __future__ import annotations


def since_on_clock(since: float, onset: float | None, first: float) -> float:
    """When a state (or a rank's last step) began, on the report's clock: `since` as watched, or the
    onset where the state was held from the first sample and the onset is older (the past told it)."""
    if onset is not None and onset < since <= first:
        return onset
    return since


def off_cpu_since(points, since: float) -> float:
    """When a process held in one wait since its first point began it: the kernel's off-CPU time at
    that point (read before any stack read woke it) moves `since` back; else `since` as watched."""
    if not points or since > points[0].time:
        return since
    main = points[0].main
    off = getattr(main, "off_cpu_s", None) if main is not None else None
    return points[0].time - off if off else since
