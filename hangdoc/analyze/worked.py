"""What `analyse` works out of a bundle for the rules besides the diagnosis, once: a rule reads it
from its context (`rules/base.py: Context.worked`) and recomputes none of it. Pure.

The four facts every analysis needs are worked out when it is made; the job's output and the
ranks' start-up are read the first time a rule asks, and kept: most rounds of a watch ask none."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from hangdoc.analyze.departures import Departure, departure_of
from hangdoc.analyze.flight import GroupFlight, flight_groups
from hangdoc.analyze.logs import RaisedError, RootCause, caught_in_worker, killed_workers, rank_exception, torchrun_root_cause
from hangdoc.analyze.restarts import Failure, Restarts, launcher_made, restarts_of
from hangdoc.analyze.startup import RankSetup, setup_of
from hangdoc.analyze.timeline import Timeline
from hangdoc.analyze.workers import RankWorkers, worker_fates
from hangdoc.model import Bundle, LogTail, ProcessInfo
from hangdoc.model.logline import killed_in_line


@dataclass(frozen=True)
class WorkerError:
    """`Caught X in DataLoader worker process N`, where the job's output says it."""

    tail: LogTail
    exception: str
    worker: int          # the worker's index in its loader
    line: int            # the line's index in its tail


@dataclass(frozen=True)
class WorkedOut:
    """The job-wide facts the rules share, each derived from the whole bundle."""

    restarts: Restarts | None          # the launcher's restarts of the ranks (analyze/restarts.py)
    departure: Departure | None        # the rank that left first, before a failure (analyze/departures.py)
    fates: dict[int, RankWorkers]      # rank pid -> its workers' fates: live, retired, dead (analyze/workers.py)
    flights: tuple[GroupFlight, ...]   # one per process group, its ranks' Flight Recorder dumps read together
    bundle: Bundle = field(repr=False, compare=False, default=None)   # what the facts read below come from

    @cached_property
    def root_cause(self) -> RootCause | None:
        """torchrun's "Root Cause (first observed failure)": the rank that failed first."""
        return torchrun_root_cause(self.bundle.logs)

    @cached_property
    def killed_workers(self) -> dict[int, str]:
        """Worker pid -> how it died, as the job's output says (`is killed by signal: X`)."""
        return killed_workers(self.bundle.logs)

    @cached_property
    def killed_lines(self) -> dict[int, str]:
        """Worker pid -> the first line of the job's output that says it died."""
        lines: dict[int, str] = {}
        for tail in self.bundle.logs:
            for line in tail.lines:
                for pid, _, _ in killed_in_line(line):
                    lines.setdefault(pid, line)
        return lines

    @cached_property
    def worker_errors(self) -> tuple[WorkerError, ...]:
        """Every `Caught X in DataLoader worker process N` the job printed, in the order it printed them."""
        return tuple(WorkerError(tail, exc, index, i) for tail in self.bundle.logs
                     for exc, index, i in caught_in_worker((tail,)))

    def exception_of(self, rank: int | None) -> RaisedError | None:
        """The Python exception the rank printed last (None: none)."""
        said = self.__dict__.setdefault("_exceptions", {})
        if rank not in said:
            said[rank] = rank_exception(self.bundle.logs, rank)
        return said[rank]

    def launcher_made(self, failure: Failure) -> str | None:
        """Why a restarted start's failure in setup is of the launcher's making (None: it is not)."""
        return launcher_made(self.bundle, failure)

    def setups(self, procs: list[ProcessInfo]) -> tuple[RankSetup, ...]:
        """Each rank's setup as its sockets at the last sample read (analyze/startup.py)."""
        return setup_of(self.bundle, procs)


def work_out(bundle: Bundle, lines: dict[int, Timeline]) -> WorkedOut:
    return WorkedOut(restarts=restarts_of(bundle), departure=departure_of(bundle), fates=worker_fates(bundle, lines),
                     flights=flight_groups(bundle.flight_records), bundle=bundle)
