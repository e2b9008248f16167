"""What `hangdoc check` found: frozen dataclasses that serialise with `hangdoc.base.serde.to_dict`.

A `CheckResult` is `{schema, command, findings, facts}`; the findings are `model.Finding`,
the same shape the live watcher reports, and the facts are the command's own tables.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hangdoc.model import Finding

CHECK_SCHEMA = "hangdoc/check-v1"


# --- data lists -------------------------------------------------------------------


@dataclass(frozen=True)
class ListEntry:
    """One line of a data list: a shard (shard list) or an utterance (raw list)."""

    source: str                    # the list file
    line: int                      # 1-based
    path: str                      # the shard, or the raw utterance's wav, resolved
    key: str | None = None         # raw lists only


@dataclass(frozen=True)
class BadLine:
    source: str
    line: int
    why: str


@dataclass(frozen=True)
class DataList:
    path: str
    kind: str                      # "shard" or "raw"
    entries: tuple[ListEntry, ...]
    bad_lines: tuple[BadLine, ...] = ()


@dataclass(frozen=True)
class Pairing:
    """How a shard's members group into samples, the way its reader groups them (check/pairing.py)."""

    members: int
    utterances: int                # whole samples: adjacent key.<audio> + key.txt pairs, or whole webdataset keys
    unpaired: tuple[str, ...] = ()  # "utt3.wav has no utt3.txt", "img7 has .jpg but no .cls, which ..."
    strays: tuple[str, ...] = ()    # members no sample takes
    layout: str = "speech"         # "speech" (WeNet) or "webdataset"


@dataclass(frozen=True)
class ShardInfo:
    index: int                     # position in the concatenated lists: the order the sampler sees
    path: str
    dataset: str                   # the list it came from
    status: str                    # "ok", "missing", "unreadable" or "remote"
    size_bytes: int | None = None
    compression: str | None = None  # "none", "bz2", "gzip", "xz", "zstd"
    members: int | None = None     # None: compressed and not sampled, so not decompressed
    utterances: int | None = None
    unpaired: tuple[str, ...] = ()
    strays: tuple[str, ...] = ()
    error: str | None = None
    layout: str | None = None      # "speech" or "webdataset" once its members were read (check/pairing.py)

    @property
    def counted(self) -> bool:
        return self.members is not None


@dataclass(frozen=True)
class Throughput:
    """One sampled shard read the way a DataLoader worker reads it: every member, in order."""

    index: int
    path: str
    compression: str
    size_bytes: int                # on disk
    tar_bytes: int                 # the uncompressed tar stream
    utterances: int
    seconds: float                 # read + decompress + walk the tar
    plain_seconds: float           # the same tar read uncompressed
    mb_per_s: float                # tar_bytes / seconds, in 10^6 bytes
    utt_per_s: float
    slowdown: float                # seconds / plain_seconds


@dataclass(frozen=True)
class WorkerShare:
    worker: int
    indices: tuple[int, ...]       # shard indices (empty for raw lists: one line is one utterance)
    items: int                     # shards, or raw-list lines
    utterances: int
    bytes: int
    batches: int | None = None     # with a batch size: ceil(utterances / batch_size)


@dataclass(frozen=True)
class RankShare:
    rank: int
    workers: tuple[WorkerShare, ...]
    items: int
    utterances: int
    bytes: int
    batches: int | None
    dataset_utterances: dict[str, int] = field(default_factory=dict)
    compression_items: dict[str, int] = field(default_factory=dict)
    compression_bytes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Partition:
    order: str                     # "classic" (shards[rank::W][worker::K]) or "torch"
    world_size: int
    num_workers: int
    ranks: tuple[RankShare, ...]


@dataclass(frozen=True)
class ListSummary:
    path: str
    kind: str
    entries: int
    bad_lines: int


@dataclass(frozen=True)
class DataFacts:
    kind: str                      # "shard" or "raw"
    lists: tuple[ListSummary, ...]
    world_size: int
    num_workers: int
    batch_size: int | None
    items: int
    shards: tuple[ShardInfo, ...]  # empty for raw lists
    throughput: tuple[Throughput, ...]
    classic: Partition
    torch: Partition
    orders_agree: bool
    estimated_shards: int          # compressed shards whose utterances are estimated, not counted
    metadata_s: float
    sample_s: float
    bad_lines: tuple[BadLine, ...] = ()
    missing_audio: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


# --- host and launch settings ----------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    num_workers: int | None
    nproc_per_node: int
    prefetch_factor: int
    batch_bytes: int | None


@dataclass(frozen=True)
class CpuFacts:
    online: int                    # os.cpu_count()
    usable: int                    # affinity mask and cgroup quota applied
    quota: float | None = None     # cgroup CPU quota in cores, when one is set


@dataclass(frozen=True)
class PtraceFacts:
    scope: int | None              # /proc/sys/kernel/yama/ptrace_scope; None: no Yama
    cap_sys_ptrace: bool | None    # from CapEff; None when it could not be read
    uid: int

    @property
    def can_attach(self) -> bool:
        """Whether py-spy may attach to a same-user process this one did not start."""
        if self.scope == 3:
            return False
        return bool(self.cap_sys_ptrace) or self.scope in (None, 0)


@dataclass(frozen=True)
class PySpyFacts:
    path: str | None
    version: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class NvmlFacts:
    available: bool
    reason: str | None = None
    driver_version: str | None = None
    gpus: int = 0


@dataclass(frozen=True)
class ShmFacts:
    path: str
    total_bytes: int | None        # None: not mounted
    free_bytes: int | None


@dataclass(frozen=True)
class EnvFacts:
    arch: str
    start_method: str
    openmp_libs: tuple[str, ...]   # libgomp / libarm_compute found on this host
    cpu: CpuFacts
    ptrace: PtraceFacts
    py_spy: PySpyFacts
    nvml: NvmlFacts
    shm: ShmFacts
    collective_env: dict[str, str]  # TORCH_NCCL_* / NCCL_* / GLOO_* in force
    timeouts: dict[str, str]        # backend -> the timeout a hung collective waits
    launch: Launch


# --- checkpoints -------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyInfo:
    path: str                      # "optimizer.param_groups"; "<root>" for a bare state_dict
    kind: str                      # "state_dict", "dict", "tensor", "int", "list", ...
    summary: str


@dataclass(frozen=True)
class Restore:
    what: str                      # "model", "optimizer", ..., "in-epoch position"
    found: str | None              # where: "checkpoint: epoch = 3", "side-car: step = 1200"


@dataclass(frozen=True)
class CheckpointFacts:
    path: str
    size_bytes: int
    side_car: str | None
    keys: tuple[KeyInfo, ...]
    side_car_keys: dict[str, str]
    restores: tuple[Restore, ...]


# --- the result ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    schema: str
    command: str                   # "data", "env" or "checkpoint"
    findings: tuple[Finding, ...]
    facts: DataFacts | EnvFacts | CheckpointFacts
