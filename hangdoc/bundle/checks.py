"""A decoded bundle is checked before anything is computed from it: bundles are shared in issues
and CI artifacts, and a hand-edited or hostile one must cost one line, never gigabytes or a traceback.

Every number that drives an allocation or a loop (world sizes, node counts, ranks) is bounded,
and what the analysis takes for granted (at least one sample) is said to be missing in one line.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from hangdoc.base.errors import BadBundle
from hangdoc.model import Bundle

# Far beyond the largest real jobs; what rules enumerate (ranks, nodes) stays a few MB at most.
MAX_WORLD = 1 << 20


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


def _number(value, what: str, source: str) -> None:
    if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value)):
        raise BadBundle(f"{source} is damaged: {what} is {value!r}, not a finite number")


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
    _number(options.interval_s, "options.interval_s", source)
    _number(options.hang_after_s, "options.hang_after_s", source)
    if options.hang_after_s is not None and options.hang_after_s < 0:
        raise BadBundle(f"{source} is damaged: options.hang_after_s is negative")
    for snapshot in bundle.samples:
        _number(snapshot.time, "a sample's time", source)
        _number(snapshot.took_s, "a sample's duration", source)
        for sample in snapshot.processes:
            main = sample.proc.main_thread if sample.proc else None
            if main is not None and main.off_cpu_s is not None:
                _number(main.off_cpu_s, f"the off-CPU time of pid {sample.pid}", source)
                if main.off_cpu_s < 0:
                    raise BadBundle(f"{source} is damaged: the off-CPU time of pid {sample.pid} is negative")
    for log in bundle.logs:
        _number(log.mtime, f"the time {log.source} was written", source)
    for end in bundle.exits:
        _number(end.time, f"the exit time of pid {end.pid}", source)
        if end.signal is not None and not (isinstance(end.signal, int) and 0 < end.signal < 128):
            raise BadBundle(f"{source} is damaged: the exit signal of pid {end.pid} is {end.signal!r}")
    return bundle
