"""A decoded bundle is checked before anything is computed from it: bundles are shared in issues
and CI artifacts, and a hand-edited or hostile one must cost one line, never gigabytes or a traceback.

Every number that drives an allocation or a loop (world sizes, node counts, ranks) is bounded,
and what the analysis takes for granted (at least one sample) is said to be missing in one line.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from hangdoc.base.errors import BadBundle
from hangdoc.base.limits import MAX_BUNDLE_VALUES, MAX_LOG_LINES, MAX_SECONDS, MAX_TIME, MAX_WORLD
from hangdoc.model import Bundle, NodeDigest


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
    of values gigabytes (20 M log lines are 40 MB of JSON)."""
    values = data.count(b",") + data.count(b"[") + data.count(b"{")
    if values > MAX_BUNDLE_VALUES:
        raise BadBundle(f"{source} is refused: it holds up to {values:,} JSON values, more than the "
                        f"{MAX_BUNDLE_VALUES:,} hangdoc reads")


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
    for rank in digest.ranks:
        what = f"the digest of pid {rank.pid}"
        _count(rank.rank, f"{what}: rank", source)
        _count(rank.group_rank, f"{what}: group rank", source)
        _count(rank.world_size, f"{what}: world size", source)
        _count(rank.local_rank, f"{what}: local rank", source)
        _count(rank.local_world_size, f"{what}: local world size", source)
        for name in ("state_since", "blocked_since", "exited_at", "unmoved_since", "started", "exit_time",
                     "last_ran", "first_seen"):
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
    options = bundle.options
    _number(bundle.created, "created", source)
    _number(options.interval_s, "options.interval_s", source, MAX_SECONDS)
    _number(options.hang_after_s, "options.hang_after_s", source, MAX_SECONDS)
    if options.hang_after_s is not None and options.hang_after_s < 0:
        raise BadBundle(f"{source} is damaged: options.hang_after_s is negative")
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
    return bundle
