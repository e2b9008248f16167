"""The watcher's Flight Recorder gathering: ask the ranks with a pipe to dump, wait for their files,
read them (`inputs/flight_dumps.py`), and the NCCL RAS state beside them once a rank looks stuck."""
from __future__ import annotations

import os
import time
from typing import Callable

from hangdoc.collect.flight_recorder import config_files, fr_configs, trigger_pipes
from hangdoc.inputs.flight_dumps import KEEP_ENTRIES, BadDump, newest, mtime_of, read_dump, size_of
from hangdoc.model import FlightRecord, Job


def collect_dumps(configs, *, trigger: bool = True, wait_s: float = 5.0,
                  clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                  opener: Callable[..., int] = os.open) -> tuple[tuple[FlightRecord, ...], tuple[str, ...]]:
    """Ask the ranks with a pipe to dump, wait at most `wait_s` for their files, read every dump there.

    Returns (records, errors): an unreadable or refused dump is one line in errors, never an exception.
    """
    configs = [c for c in configs if c.rank is not None]
    asked, refused = trigger_pipes(configs, opener) if trigger else ([], [])
    started = clock()
    if asked:
        pending = {c.rank: c for c in configs if c.rank in asked}
        sizes: dict[int, int] = {}
        while pending and clock() - started < wait_s:
            for rank, config in list(pending.items()):
                files = [f for f in config_files(config) if mtime_of(f) >= started - 1.0]
                size = sum(size_of(f) for f in files)
                if files and size and sizes.get(rank) == size:     # written, and no longer growing
                    del pending[rank]
                sizes[rank] = size
            if pending:
                sleep(0.2)
    records, errors = [], list(refused)
    for config in configs:
        for path in config_files(config):
            try:
                records.append(read_dump(path, config.rank, "pipe" if config.rank in asked else "found"))
            except BadDump as exc:
                errors.append(str(exc))
    return tuple(records), tuple(errors)


class FlightCollector:
    """The watcher's FR and RAS evidence: settings every round; dumps and RAS once a rank looks stuck.

    The ranks' dump pipes are written to when a rank first looks stuck and again at most every
    `retrigger_s` while it stays so (NCCL dumps on every write); dump files are read again only
    when they change. Files older than the job's first rank are another job's, and skipped.
    """

    def __init__(self, wait_s: float = 5.0, ras: Callable | None = None, retrigger_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.wait_s, self.retrigger_s, self.clock = wait_s, retrigger_s, clock
        self.ras_query = ras
        self.triggered_at: float | None = None
        self.records: tuple[FlightRecord, ...] = ()
        self.errors: tuple[str, ...] = ()
        self.ras = None
        self._seen: dict[str, float] = {}

    def gather(self, job: Job, stuck: bool) -> bool:
        """Collect what there is; True when the evidence changed (the bundle should be redone)."""
        if not stuck or not job.ranks:
            return False
        changed = False
        if self.ras is None:
            from hangdoc.collect.ras import query_ras, uses_nccl

            if uses_nccl(job):
                self.ras = (self.ras_query or query_ras)(job)
                changed = True
        since = min(p.start_time for p in job.ranks)
        configs = fr_configs(job)
        files = {str(f): mtime_of(f) for c in configs for f in config_files(c)}
        fresh = {path: t for path, t in files.items() if t >= since}
        now = self.clock()
        trigger = any(c.pipe_exists for c in configs) and (
            self.triggered_at is None or now - self.triggered_at >= self.retrigger_s)
        if trigger:
            self.triggered_at = now
        elif fresh == self._seen:
            return changed
        records, errors = collect_dumps(configs, trigger=trigger, wait_s=self.wait_s)
        records = tuple(newest(r, KEEP_ENTRIES) for r in records if (r.mtime or 0.0) >= since)
        self._seen = {str(f): t for c in configs for f in config_files(c) if (t := mtime_of(f)) >= since}
        if (records, errors) != (self.records, self.errors):
            self.records, self.errors, changed = records, errors, True
        return changed
