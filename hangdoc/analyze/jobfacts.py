"""What the decision reads besides the ranks (`analyze/diagnose.py: decide`), and how the ranks
ended (`analyze/ending.py`) reads too: the job's clock, logs, exit code and records. Pure data."""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.analyze.departures import Departure
from hangdoc.analyze.restarts import Restarts
from hangdoc.model import Bundle, LogTail

NCCL, GLOO = "nccl", "gloo"


def backend(bundle: Bundle) -> str | None:
    """The job's process-group backend, "nccl" or "gloo"; None when nothing of the ranks was read.
    c10d names its threads, which tells it: NCCL's watchdog (pt_nccl_*) makes it NCCL, gloo's run
    loops (pt_gloo_*, gloo_*) alone gloo. Where no thread names were read (older bundles), a rank
    mapping libnccl means NCCL; but every process of a CUDA build of torch maps it, gloo jobs too."""
    names = {n for s in bundle.last.processes if s.proc is not None for n in s.proc.thread_names}
    if any(n.startswith("pt_nccl") for n in names):
        return NCCL
    if any(n.startswith(("pt_gloo", "gloo_")) for n in names):
        return GLOO
    libs = [lib for p in bundle.job.ranks for lib in p.libs]
    if any("libnccl" in lib for lib in libs):
        return NCCL
    return GLOO if libs or names else None


NCCL_TIMEOUT_S = 600.0
GLOO_TIMEOUT_S = 1800.0


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
    pg_timeout_s: float = GLOO_TIMEOUT_S  # the process group's timeout: a wait longer than it kills the job


def pg_timeout(bundle: Bundle) -> float:
    """The default timeout of the job's backend (`backend`): gloo's where it is not NCCL."""
    return NCCL_TIMEOUT_S if backend(bundle) == NCCL else GLOO_TIMEOUT_S
