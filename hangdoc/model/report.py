"""What a report says: findings, the ranks as the reader sees them, the verdict."""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.model.vocab import Progress, Severity, Verdict

REPORT_SCHEMA = "hangdoc/report-v1"


@dataclass(frozen=True)
class Finding:
    rule: str                      # a stable slug: "collective-straggler"
    severity: Severity
    ranks: tuple[int, ...]
    title: str                     # one line
    evidence: tuple[str, ...]      # frames, files, numbers, log lines
    fix: str


@dataclass(frozen=True)
class WorkerReport:
    pid: int
    index: int | None
    state: str
    top_frame: str | None
    alive: bool = True


@dataclass(frozen=True)
class RankGpu:
    """A rank's GPU at the last sample, as the report shows it."""

    index: int
    utilization_pct: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    memory_used_bytes: int | None = None


@dataclass(frozen=True)
class RankReport:
    rank: int | None
    pid: int
    host: str
    state: str
    waiting_s: float
    progress: Progress
    gpu: RankGpu | None
    top_frame: str | None
    workers: tuple[WorkerReport, ...] = ()
    group_rank: int | None = None  # torchrun's node (agent) index: which node the rank runs on
    # A row of a merged report may stand for a class of ranks (same state, stack and workers):
    # `rank` is its lowest, `rank_set` all of them ("0-2047,2050-65535"), `rank_count` how many.
    rank_count: int = 1
    rank_set: str | None = None


@dataclass(frozen=True)
class Threshold:
    """How hang was told from slow: the threshold, where it came from, and the quiet so far."""

    source: str                    # "given" (--hang-after), "learned" (the job's steps), "default"
    hang_after_s: float
    longest_step_s: float | None   # the longest gap between two steps of one rank, as seen
    steps_seen: int
    quiet_s: float                 # how long no rank has stepped (nor done I/O of its own)
    signal: str                    # "loop" (the job's locals) or "frames" (no locals could be read)


@dataclass(frozen=True)
class Report:
    schema: str
    verdict: Verdict
    detected_after_s: float | None
    culprit_ranks: tuple[int, ...]
    findings: tuple[Finding, ...]
    ranks: tuple[RankReport, ...]
    # How long until the process group's timeout kills the job (and the evidence): an estimate
    # from the backend's default (NCCL 600 s, gloo 1800 s) since code can set its own.
    pg_timeout_s: float | None = None
    timeout_remaining_s: float | None = None
    host: str | None = None
    threshold: Threshold | None = None
