"""A decoded bundle is checked before anything is computed from it: bundles are shared in issues
and CI artifacts, and a hand-edited or hostile one must cost one line, never gigabytes or a traceback.

Every number that drives an allocation or a loop (world sizes, node counts, ranks) is bounded,
and what the analysis takes for granted (at least one sample) is said to be missing in one line.
"""
from __future__ import annotations

import math
import operator
from contextlib import contextmanager

from hangdoc.base.errors import BadBundle
import msgspec

from hangdoc.base.limits import (
    MAX_BUNDLE_PROCESSES, MAX_BUNDLE_VALUES, MAX_LOG_LINES, MAX_SECONDS, MAX_STACK_FRAMES, MAX_TIME, MAX_WORLD,
)
from hangdoc.bundle.timeorder import in_time_order
from hangdoc.model import Bundle, NodeDigest, Role


@contextmanager
def hostile_input(source: str):
    """Decoding errors that a crafted file can cause become one line (exit 2)."""
    try:
        yield
    except RecursionError:
        raise BadBundle(f"{source} is nested too deeply to be a hangdoc bundle (hand-edited or crafted?)") from None
    except MemoryError:
        raise BadBundle(f"{source} is too large to load") from None


def _count(value, what: str, source: str, low: int = 0) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_WORLD:
        raise BadBundle(f"{source} is damaged: {what} is {value!r}, outside {low}..{MAX_WORLD}")


def _number(value, what: str, source: str, bound: float = MAX_TIME) -> None:
    """A finite number within +-`bound`: epoch seconds (a time) by default, or a duration."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadBundle(f"{source} is damaged: {what} is {value!r}, not a finite number")
    if abs(value) > bound:
        raise BadBundle(f"{source} is damaged: {what} is {value:g}, beyond +-{bound:g} s")


def check_values(data: bytes, source: str) -> None:
    """Refuse JSON that would decode into more than MAX_BUNDLE_VALUES values, before decoding it.

    Every value but a container's first follows a comma, so commas and openings bound the count
    (commas inside strings only raise it); counting bytes costs milliseconds, decoding millions
    of values gigabytes (20 M log lines are 40 MB of JSON). Each value takes two bytes at least
    (a one-byte number and its comma, a container's brackets), so JSON of fewer than twice
    MAX_BUNDLE_VALUES bytes is not counted at all: a node's head is read in microseconds."""
    if len(data) < 2 * MAX_BUNDLE_VALUES:
        return
    values = data.count(b",") + data.count(b"[") + data.count(b"{")
    if values > MAX_BUNDLE_VALUES:
        raise BadBundle(f"{source} is refused: it holds up to {values:,} JSON values, more than the "
                        f"{MAX_BUNDLE_VALUES:,} hangdoc reads")


class _Anything(msgspec.Struct):
    """Any JSON object, its fields skipped."""


class _Job(msgspec.Struct):
    processes: list[_Anything] = []


class _V2Body(msgspec.Struct):
    job: _Job | None = None


class _Processes(msgspec.Struct):
    job: _Job | None = None          # v1
    bundle: _V2Body | None = None    # v2


def check_processes(data: bytes, source: str) -> None:
    """Refuse a bundle of more than MAX_BUNDLE_PROCESSES processes before decoding it: a bundle is
    one node's, and every process costs the analysis its share whether or not it is a rank (a
    200,000-rank bundle of 820 KB took 77 s and 1.66 GB). Counted without building them; a
    document of another shape is left to the decoding, which names what is wrong."""
    try:
        found = msgspec.json.decode(data, type=_Processes)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return
    job = found.job or (found.bundle.job if found.bundle else None)
    count = len(job.processes) if job else 0
    if count > MAX_BUNDLE_PROCESSES:
        raise BadBundle(f"{source} is refused: it holds {count:,} processes, more than the "
                        f"{MAX_BUNDLE_PROCESSES:,} of one node hangdoc reads in a bundle")


def check_logs(logs, source: str) -> None:
    for log in logs:
        if len(log.lines) > MAX_LOG_LINES:
            raise BadBundle(f"{source} is refused: the log tail of {log.source} holds {len(log.lines):,} lines, "
                            f"more than the {MAX_LOG_LINES:,} hangdoc reads")
        _number(log.mtime, f"the time {log.source} was written", source)


def check_head(head, source: str):
    """A node's head (`codec.Head`: its digest and a few bundle fields), checked as its bundle would be."""
    _count(head.bundle.job.world_size, "job.world_size", source, low=1)
    _number(head.bundle.options.interval_s, "options.interval_s", source, MAX_SECONDS)
    _number(head.bundle.options.hang_after_s, "options.hang_after_s", source, MAX_SECONDS)
    check_logs(head.bundle.logs, source)
    check_digest(head.digest, source)
    return head


_RANK_TIMES = ("state_since", "blocked_since", "exited_at", "unmoved_since", "started", "exit_time", "last_ran",
               "first_seen")
_RANK_COUNTS = ("rank", "group_rank", "world_size", "local_rank", "local_world_size")


def _ranks_within(ranks) -> bool:
    """Every rank's numbers within bounds, in one pass that builds no message: a job's digests hold
    a hundred thousand ranks. The decoder has typed them already (an int is no bool, a number is finite)."""
    times = operator.attrgetter(*_RANK_TIMES)
    counts = operator.attrgetter(*_RANK_COUNTS)
    at = [v for r in ranks for v in (*times(r), r.rhythm.last_sign) if v is not None]
    sizes = [v for r in ranks for v in counts(r) if v is not None]
    gaps = [r.rhythm.longest_gap_s for r in ranks if r.rhythm.longest_gap_s is not None]
    return ((not at or -MAX_TIME <= min(at) <= max(at) <= MAX_TIME)
            and (not sizes or 0 <= min(sizes) <= max(sizes) <= MAX_WORLD)
            and (not gaps or -MAX_SECONDS <= min(gaps) <= max(gaps) <= MAX_SECONDS))


def check_digest(digest: NodeDigest | None, source: str) -> None:
    """A node's digest, checked as its bundle would be: it decides a job of thousands of nodes alone."""
    if digest is None:
        return
    _count(digest.group_world_size, "digest.group_world_size", source)
    _count(len(digest.ranks), "the digest's rank count", source)
    _number(digest.first, "digest.first", source)
    _number(digest.last, "digest.last", source)
    for t in digest.collective_steps:
        _number(t, "a collective step's time", source)
    for t in digest.output_steps:
        _number(t, "an output step's time", source)
    if _ranks_within(digest.ranks):
        return
    for rank in digest.ranks:          # one is not: name it
        what = f"the digest of pid {rank.pid}"
        _count(rank.rank, f"{what}: rank", source)
        _count(rank.group_rank, f"{what}: group rank", source)
        _count(rank.world_size, f"{what}: world size", source)
        _count(rank.local_rank, f"{what}: local rank", source)
        _count(rank.local_world_size, f"{what}: local world size", source)
        for name in _RANK_TIMES:
            _number(getattr(rank, name), f"{what}: {name}", source)
        _number(rank.rhythm.longest_gap_s, f"{what}: longest gap", source, MAX_SECONDS)
        _number(rank.rhythm.last_sign, f"{what}: last sign", source)


def check_bundle(bundle: Bundle, source: str = "bundle") -> Bundle:
    """The bundle itself when every size in it is one the analysis can afford; else BadBundle."""
    if not bundle.samples:
        raise BadBundle(f"{source} holds no samples (the job ended before any process was captured); "
                        "there is nothing to diagnose")
    job = bundle.job
    _count(job.world_size, "job.world_size", source, low=1)
    for proc in job.processes:
        _count(proc.world_size, f"the world size of pid {proc.pid}", source, low=1)
        _count(proc.rank, f"the rank of pid {proc.pid}", source)
        _count(proc.local_rank, f"the local rank of pid {proc.pid}", source)
        _count(proc.group_rank, f"the node (group rank) of pid {proc.pid}", source)
        _count(proc.worker_index, f"the worker index of pid {proc.pid}", source)
        _count(proc.num_workers, f"the worker count of pid {proc.pid}", source)
        for name in ("GROUP_WORLD_SIZE", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            value = proc.env.get(name)
            if value is not None and value.strip().lstrip("-").isdigit():
                _count(int(value), f"{name} of pid {proc.pid}", source)
    _check_identities(bundle, source)
    options = bundle.options
    _number(bundle.created, "created", source)
    _number(options.interval_s, "options.interval_s", source, MAX_SECONDS)
    _number(options.hang_after_s, "options.hang_after_s", source, MAX_SECONDS)
    if options.hang_after_s is not None and options.hang_after_s < 0:
        raise BadBundle(f"{source} is damaged: options.hang_after_s is negative")
    frames = sum(len(thread.frames) for snapshot in bundle.samples for sample in snapshot.processes
                 if sample.stack is not None for thread in sample.stack.threads)
    if frames > MAX_STACK_FRAMES:
        # A v2 stack is stored once and named by every process and sample standing in it, and the
        # analysis reads it at each: one 200,000-frame stack named by 2,000 ranks ran for minutes.
        raise BadBundle(f"{source} is refused: its samples name {frames:,} stack frames in all, more than "
                        f"the {MAX_STACK_FRAMES:,} hangdoc reads")
    for snapshot in bundle.samples:
        _number(snapshot.time, "a sample's time", source)
        _number(snapshot.took_s, "a sample's duration", source, MAX_SECONDS)
        for sample in snapshot.processes:
            main = sample.proc.main_thread if sample.proc else None
            if main is not None and main.off_cpu_s is not None:
                _number(main.off_cpu_s, f"the off-CPU time of pid {sample.pid}", source, MAX_SECONDS)
                if main.off_cpu_s < 0:
                    raise BadBundle(f"{source} is damaged: the off-CPU time of pid {sample.pid} is negative")
    check_logs(bundle.logs, source)
    for end in bundle.exits:
        _number(end.time, f"the exit time of pid {end.pid}", source)
        if end.signal is not None and not (isinstance(end.signal, int) and 0 < end.signal < 128):
            raise BadBundle(f"{source} is damaged: the exit signal of pid {end.pid} is {end.signal!r}")
    return in_time_order(bundle, source)


def _check_identities(bundle: Bundle, source: str) -> None:
    """Pids are positive and name one process each, and no two processes are one rank of one node's
    start at once: a bundle that says otherwise was edited, and reading it either way changes the
    verdict (two processes standing as rank 0 turned a crash into a healthy run)."""
    job = bundle.job
    seen: set[int] = set()
    for proc in job.processes:
        if proc.pid < 1 or proc.ppid < 0:
            raise BadBundle(f"{source} is damaged: a process has pid {proc.pid} (parent {proc.ppid}); pids are positive")
        if proc.pid in seen:
            raise BadBundle(f"{source} is damaged: pid {proc.pid} is listed as two processes")
        seen.add(proc.pid)
    if job.launcher_pid is not None and job.launcher_pid < 1:
        raise BadBundle(f"{source} is damaged: the launcher's pid is {job.launcher_pid}")
    for pid in [s.pid for snapshot in bundle.samples for s in snapshot.processes] + [e.pid for e in bundle.exits]:
        if pid < 1:
            raise BadBundle(f"{source} is damaged: a sample or an exit names pid {pid}; pids are positive")
    holders: dict[tuple, list[int]] = {}
    for proc in job.by_role(Role.RANK):
        if proc.rank is not None:
            holders.setdefault((proc.host, proc.generation, proc.rank), []).append(proc.pid)
    shared = {pid: key for key, pids in holders.items() if len(pids) > 1 for pid in pids}
    if not shared:
        return
    for snapshot in bundle.samples:
        alive: dict[tuple, list[int]] = {}
        for sample in snapshot.processes:
            if sample.pid in shared and sample.alive:
                alive.setdefault(shared[sample.pid], []).append(sample.pid)
        for (_, _, rank), pids in alive.items():
            if len(pids) > 1:
                raise BadBundle(f"{source} is damaged: pids {pids[0]} and {pids[1]} are both rank {rank} of one "
                                "node's start, alive at once")
