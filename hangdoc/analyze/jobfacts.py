"""What the decision reads besides the ranks (`analyze/diagnose.py: decide`), and how the ranks
ended (`analyze/ending.py`) reads too: the job's clock, logs, exit code and records. Pure data."""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.analyze.departures import Departure
from hangdoc.analyze.restarts import Restarts
from hangdoc.model import LogTail


@dataclass(frozen=True)
class JobFacts:
    """What the decision reads besides the ranks: the job's clock, logs and exit code."""

    first: float                       # the first sample's time
    now: float                         # the last sample's time
    logs: tuple[LogTail, ...]
    exit_code: int | None
    hang_after: float | None
    collective_steps: tuple[float, ...] = ()
    fr_pending: tuple[float, int | None, str] | None = None   # the Flight Recorder's oldest pending collective
    restarts: Restarts | None = None   # the launcher's restarts of the ranks (analyze/restarts.py)
    launcher_code: int | None = None   # the launcher's exit code, read as it died (None: not read)
    departure: Departure | None = None   # the rank that left first, before a failure (analyze/departures.py)
