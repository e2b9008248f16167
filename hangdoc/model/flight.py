"""The job's own record of its collectives: Flight Recorder dumps and NCCL's RAS answer.

Read at capture time (`collect/`), carried by the `Bundle` (`model/capture.py`), so the rules
read them like any other part of the capture.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FrFrame:
    name: str
    filename: str
    line: int


@dataclass(frozen=True)
class FrEntry:
    """One collective a rank's Flight Recorder kept (the fields hangdoc reads of a dump entry)."""

    pg_name: str                   # process_group[0]: "0" is the default group
    pg_desc: str                   # process_group[1]: "default_pg", "undefined", a user's desc
    seq: int                       # collective_seq_id (p2p_seq_id for point-to-point ops)
    op: str                        # profiling_name: "nccl:all_reduce", "gloo:broadcast"
    state: str                     # "scheduled", "started" or "completed" (gloo: always "scheduled")
    retired: bool                  # the work finished and left the recorder's active set
    input_sizes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    output_sizes: tuple[tuple[int, ...], ...] = ()
    output_dtypes: tuple[str, ...] = ()
    is_p2p: bool = False
    time_created_ns: int | None = None
    duration_ms: float | None = None
    frames: tuple[FrFrame, ...] = ()   # innermost first; only the pickle form carries them


@dataclass(frozen=True)
class FrGroup:
    """A process group as one rank's dump describes it (pg_config and pg_status)."""

    name: str
    desc: str = ""
    ranks: tuple[int, ...] = ()    # global ranks, when the dump records them
    last_enqueued: int | None = None
    last_started: int | None = None
    last_completed: int | None = None


@dataclass(frozen=True)
class FlightRecord:
    """One rank's Flight Recorder dump, read without executing anything."""

    rank: int
    source: str                    # the file it was read from
    form: str                      # "pickle" or "json"
    version: str
    trigger: str                   # "pipe" (hangdoc asked), "found" (timeout dump, an earlier crash), "given"
    groups: tuple[FrGroup, ...] = ()
    entries: tuple[FrEntry, ...] = ()
    mtime: float | None = None
    host: str | None = None


@dataclass(frozen=True)
class FrConfig:
    """What a rank's environment says about its Flight Recorder, and whether its dump pipe exists."""

    pid: int
    rank: int | None
    buffer_size: int | None        # TORCH_FR_BUFFER_SIZE (or its alias); None: unset, the torch default
    dump_prefix: str               # TORCH_FR_DUMP_TEMP_FILE, or torch 2.13's default (~/.cache/torch/comm_lib_trace_rank_)
    pipe: str | None = None        # <TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe, when that is set
    pipe_exists: bool = False
    dump_on_timeout: bool | None = None   # TORCH_NCCL_DUMP_ON_TIMEOUT; None: unset
    prefix_set: bool = False       # dump_prefix came from the environment (else the defaults are searched)

    @property
    def state(self) -> str:
        """"on", "off" or "default" (unset: torch 2.13 records 2000 entries, older releases none)."""
        if self.buffer_size is None:
            return "default"
        return "on" if self.buffer_size > 0 else "off"


@dataclass(frozen=True)
class RasComm:
    """One NCCL communicator as the RAS service reported it."""

    hash: str
    size: int
    ranks_reporting: int
    missing_ranks: tuple[int, ...] = ()
    dead_ranks: tuple[int, ...] = ()
    unresponsive_ranks: tuple[int, ...] = ()
    collective_counts: dict[str, int] = field(default_factory=dict)   # comm rank -> collectives launched


@dataclass(frozen=True)
class RasStatus:
    """The answer of NCCL's RAS service (ncclras, or its port on localhost), or why there is none."""

    source: str                    # "ncclras" or "localhost:28028"
    status: str                    # "ok" or "unavailable"
    reason: str | None = None
    form: str = "text"             # "json" (NCCL >= 2.28) or "text"
    nccl_version: str | None = None
    communicators: tuple[RasComm, ...] = ()
    dead_processes: int = 0
    lines: tuple[str, ...] = ()    # the text answer, first lines


def op_name(profiling_name: str) -> str:
    """"nccl:all_reduce" -> "all_reduce": a recorded collective's name without its backend."""
    return profiling_name.split(":", 1)[-1]
