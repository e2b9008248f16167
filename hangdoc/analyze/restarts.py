"""A job its launcher restarts: torchrun's elastic agent (`--max-restarts`), read from the bundle.

When a rank fails and restarts are left, the agent stops the other ranks and starts every rank
again, with new pids and TORCHELASTIC_RESTART_COUNT one higher in their environment (a
*generation*). A generation's failure is then an event of the job, not its end: the job is
judged by its newest generation (`Job.ranks`), and the failures of the earlier ones are said
(`rules/workers_restarted.py`). Restarts used up, the job's crash is named by its first failure.
"""
from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass

from hangdoc.analyze.logs import all_lines, rank_exception
from hangdoc.base.parse import to_int
from hangdoc.model import Bundle, ProcessInfo


@dataclass(frozen=True)
class Failure:
    """The first rank of one generation that failed: how, when, and what it printed."""

    generation: int
    rank: int | None
    pid: int                       # on its own node
    time: float | None             # when it died (None: only a later sample found it gone)
    code: int | None
    signal: int | None
    said: str | None = None        # the exception it printed, when the job's output was read

    @property
    def how(self) -> str:
        if self.signal is not None:
            return f"was killed by {_signal_name(self.signal)}"
        if self.code is not None:
            return f"exited with code {self.code}"
        return "vanished; its exit status could not be read"


@dataclass(frozen=True)
class Restarts:
    """What the launcher's restarts did: the current generation, the most allowed, each failure."""

    generation: int                # the newest generation's restart count (0: never restarted)
    max_restarts: int | None       # TORCHELASTIC_MAX_RESTARTS (None: not said)
    failures: tuple[Failure, ...]  # the first failure of each generation that failed, oldest first
    launcher_alive: bool           # the launcher was alive at the last sample
    generation_failed: bool        # a rank of the newest generation failed (the launcher stops the others)
    started: tuple[float, ...] = ()   # when each generation after the first began (its first rank's start)

    @property
    def began(self) -> float | None:
        """When the newest generation began (None: the first start, whose beginning the watch may
        not have seen): its quiet counts from there, not from the first sample."""
        return self.started[-1] if self.started and self.restarted else None

    @property
    def restarted(self) -> bool:
        return self.generation > 0

    @property
    def left(self) -> int | None:
        return None if self.max_restarts is None else max(0, self.max_restarts - self.generation)

    @property
    def pending(self) -> bool:
        """The newest generation failed and the launcher lives with restarts left: it starts the next."""
        return self.generation_failed and self.launcher_alive and bool(self.left)

    @property
    def used_up(self) -> bool:
        """The newest generation failed with no restart left: the job's crash."""
        return self.generation_failed and self.restarted and not self.left

    @property
    def first(self) -> Failure | None:
        return self.failures[0] if self.failures else None


def restarts_of(bundle: Bundle) -> Restarts | None:
    """The job's restarts, or None for a job whose launcher may not restart it (no elastic agent
    said a maximum) and that was never restarted."""
    ranks = bundle.job.all_ranks
    if not ranks:
        return None
    current = bundle.job.ranks
    generation = max(p.generation for p in current)
    max_restarts = max((m for p in ranks if (m := to_int(p.env.get("TORCHELASTIC_MAX_RESTARTS"))) is not None),
                       default=None)
    if generation == 0 and not max_restarts:
        return None
    by_generation: dict[int, list[ProcessInfo]] = {}
    for proc in ranks:
        by_generation.setdefault(proc.generation, []).append(proc)
    failures = tuple(f for g in sorted(by_generation) if (f := _first_failure(bundle, g, by_generation[g])))
    launcher = bundle.job.launcher_pid
    sample = bundle.last.sample_of(launcher) if launcher is not None and bundle.samples else None
    alive = sample is not None and sample.alive
    failed = any(f.generation == generation for f in failures)
    started = tuple(min(p.start_time for p in by_generation[g]) for g in sorted(by_generation) if g > 0)
    return Restarts(generation, max_restarts, failures, alive, failed, started)


def _first_failure(bundle: Bundle, generation: int, procs: list[ProcessInfo]) -> Failure | None:
    """The generation's first rank to fail: the earliest failed exit, a fatal signal or an error
    before the launcher's SIGTERM when read at one instant. A rank whose status the watch could not
    read (its launcher reaped it first) counts with what torchrun's log says of it, or as unknown."""
    logged = _logged_exits(bundle)
    failed = []
    for proc in procs:
        record = bundle.exit_of(proc.pid)
        if record is None:
            continue
        code, sig = record.code, record.signal
        if not record.told:
            said = logged.get(proc.node_pid)
            code, sig = (None, -said) if said is not None and said < 0 else (said, None)
        if sig is not None or code != 0:
            order = 2 if sig == signals.SIGTERM else (0 if sig is not None else 1 if code is not None else 3)
            failed.append((record.time, order, proc, code, sig))
    if not failed:
        return None
    when, _, proc, code, sig = min(failed, key=lambda f: (f[0], f[1], f[2].rank if f[2].rank is not None else -1))
    raised = rank_exception(bundle.logs, proc.rank) if code != 0 and sig is None else None
    said = raised.messages[-1] if raised is not None and raised.messages else None
    return Failure(generation, proc.rank, proc.node_pid, when, code, sig, said)


_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: \d+ \(pid: (\d+)\)")


def _logged_exits(bundle: Bundle) -> dict[int, int]:
    """pid -> exit code from torchrun's "failed (exitcode: N) local_rank: L (pid: P)" lines (negative: a signal)."""
    found: dict[int, int] = {}
    for _, line in all_lines(bundle.logs):
        for match in _TORCHRUN_FAILED.finditer(line):
            found[int(match.group(2))] = int(match.group(1))
    return found


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"
