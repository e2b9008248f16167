"""What `analyse` works out of a bundle for the rules besides the diagnosis, once: a rule reads it
from its context (`rules/base.py: Context.worked`) and recomputes none of it. Pure."""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.analyze.departures import Departure, departure_of
from hangdoc.analyze.flight import GroupFlight, flight_groups
from hangdoc.analyze.restarts import Restarts, restarts_of
from hangdoc.analyze.timeline import Timeline
from hangdoc.analyze.workers import RankWorkers, worker_fates
from hangdoc.model import Bundle


@dataclass(frozen=True)
class WorkedOut:
    """The job-wide facts the rules share, each derived from the whole bundle."""

    restarts: Restarts | None          # the launcher's restarts of the ranks (analyze/restarts.py)
    departure: Departure | None        # the rank that left first, before a failure (analyze/departures.py)
    fates: dict[int, RankWorkers]      # rank pid -> its workers' fates: live, retired, dead (analyze/workers.py)
    flights: tuple[GroupFlight, ...]   # one per process group, its ranks' Flight Recorder dumps read together


def work_out(bundle: Bundle, lines: dict[int, Timeline]) -> WorkedOut:
    return WorkedOut(restarts=restarts_of(bundle), departure=departure_of(bundle), fates=worker_fates(bundle, lines),
                     flights=flight_groups(bundle.flight_records))
