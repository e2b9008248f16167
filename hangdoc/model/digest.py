"""A node's own reading of its ranks (bundle v2's "digest"): what a whole job's verdict needs, no frames."""
from __future__ import annotations

import msgspec

# The analysis that produced a digest: a digest of another version is recomputed from the
# bundle's samples, so a newer hangdoc never trusts an older one's conclusions.
# 2: each rank's exit status (exit_time, exit_code, exit_signal).
# 3: a poll loop's tries are no steps (rhythm); ranks in process-group setup (joining) and the
#    numbers that tell which ranks a node should run (world_size, local_rank, local_world_size).
# 4: when each rank's main thread last ran before hangdoc first read it (last_ran), and when that
#    first read was (first_seen); whether nothing of it worked while watched (still); where its
#    time went over its last steps (shares).
# 5: since when it did nothing of its own (held_since): no progress is a hang whatever the ranks do.
# 6: the place its main thread stands at (place), a spin line whichever of its frames a sample
#    caught; loop counters read only where a frame holds integers (rhythm.has_locals); steps seen
#    by every witness (the stack going round, a waiting rank woken, bytes); the start-up's gap
#    left out of the rhythm; where its time went by place (shares.places), its workers' cores
#    (workers_cpu); in setup, the store it was pointed at and whether it reached it (store,
#    store_reached), and which start of the job it belongs to (generation).
# 8: the share of its window its main thread waited on a run queue for a CPU (runqueue).
# 9: what proves it hung, where a fact of /proc or its stacks does (proof).
# 10: two more proofs (a pipe no process can write, a collective's peer gone) and the ranks a proof
#     names as culprits where they are not its own (proof.culprits).
DIGEST_VERSION = 10


class StepSummary(msgspec.Struct, frozen=True, gc=False):
    """A rank's rhythm in a few numbers: each folds over ranks by sum, max or any."""

    steps: int                     # steps seen
    longest_gap_s: float | None    # the longest gap between two of its steps
    last_sign: float | None        # the last sample at which it stepped or did I/O of its own
    has_locals: bool               # its loop position could be read
    data_sign: float | None = None  # the last sample at which its DataLoader workers read new ground in their files
    gpu_sign: float | None = None   # the last sample at which its GPU had been at work since the one before


class ShareCounts(msgspec.Struct, frozen=True, gc=False):
    """Where a rank's samples found it over a stretch of its steps: counts that fold by sum."""

    n: int = 0                     # samples
    step_wait: int = 0             # in a collective of the training step (the gradient all_reduce, ...)
    other_wait: int = 0            # in another collective (a barrier, a broadcast): pauses, not the step
    data: int = 0                  # waiting on its DataLoader
    compute: int = 0
    io: int = 0
    # Where its samples stood outside the step's collectives and its DataLoader (v6): the places
    # (innermost frame, a spin line's generator expression folded into it) it was caught at most,
    # with their counts. On NCCL the host waits for the step's collectives at a sync line of the
    # job's own (`.item()`): the waiting ranks stand there, the straggler hardly ever.
    places: tuple[tuple[str, int], ...] = ()
    waited: tuple[str, ...] = ()   # those of its places where a native read found it waiting on the others

    def at(self, place: str) -> int:
        return next((n for label, n in self.places if label == place), 0)

    def __add__(self, other: "ShareCounts") -> "ShareCounts":
        counts = [a + b for a, b in zip(msgspec.structs.astuple(self)[:-2], msgspec.structs.astuple(other)[:-2])]
        places = dict(self.places)
        for label, n in other.places:
            places[label] = places.get(label, 0) + n
        return ShareCounts(*counts, places=tuple(sorted(places.items(), key=lambda kv: (-kv[1], kv[0]))),
                           waited=tuple(sorted(set(self.waited) | set(other.waited))))


class DigestWorker(msgspec.Struct, frozen=True, gc=False):
    pid: int                       # on its own node
    index: int | None
    state: str
    top_frame: str | None
    alive: bool = True


class Proof(msgspec.Struct, frozen=True, gc=False):
    """A positive fact that a rank can never step again (`analyze/proofs.py`), seen alike at two
    samples at least a proof's span apart: not an absence of progress, which only the threshold judges."""

    kind: str                      # a ProofKind's value: "stopped", "fork-lock", "lock-cycle", ...
    since: float                   # the first sample that showed it
    at: float                      # the latest sample that agreed
    said: str                      # the proof in the report's words
    pid: int | None = None         # the process it proves of (on its own node): the rank, or its worker
    # The ranks it names as the culprits, where they are not the rank that holds it (peer-gone: the
    # peer that left; empty: a peer no rank of the bundle is known as). None: the rank that holds it.
    culprits: tuple[int, ...] | None = None


class RankDigest(msgspec.Struct, frozen=True, gc=False):
    """One rank as its node's analysis saw it: what the verdict of a whole job needs, and no
    frames. Thousands of nodes' digests decide a job without loading every sample."""

    rank: int | None
    pid: int                       # on its own node
    host: str
    group_rank: int | None
    state: str
    detail: str | None
    top_frame: str | None
    stack_key: str                 # the main thread's functions, hashed: ranks in one STAT class share it
    state_since: float
    blocked_since: float | None
    exited_at: float | None
    progress: str
    rhythm: StepSummary
    unmoved_since: float | None    # the latest of the rank's and its live workers' "frozen since"
    points: int                    # samples of the rank
    workers: tuple[DigestWorker, ...] = ()
    started: float = 0.0           # the rank process's start time (tells one run from a restart)
    # Its exit as the bundle's exit record has it (None: no record, an older bundle); a record
    # whose code and signal are both None says it exited without its status being read.
    exit_time: float | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    # What it waits in for every rank to join ("init_process_group", "new_group", "TCPStore"):
    # None when it is not in process-group setup. With the numbers below, it tells whom the
    # ranks in setup wait for: the ranks elsewhere, and those absent from a captured node.
    joining: str | None = None
    world_size: int | None = None
    local_rank: int | None = None
    local_world_size: int | None = None
    # The past as the kernel told it at the rank's first sample: when its main thread had last run
    # (None: not read, an older bundle), and that first sample's time.
    last_ran: float | None = None
    first_seen: float | None = None
    # Nothing of it worked while watched: no new frame, and its process, live workers and
    # children used next to no CPU and moved next to no bytes (analyze/timeline.still).
    still: bool = False
    # Where its time went over the sliding window of its steps (analyze/shares.py), in two halves
    # (earlier, later): a straggler is one in both. Empty: too few samples, or an older digest.
    shares: tuple[ShareCounts, ...] = ()
    # Since when it did nothing of its own (v5): no step, no bytes of its own, either in a wait
    # (a collective, its DataLoader, asleep) or standing at one line with its counters still (a
    # host spinning at a sync), and none of its live workers moved. None: it is not so now.
    held_since: float | None = None
    # The innermost frame of the place it stands at (v6): its top frame, with a generator
    # expression or lambda on its caller's line folded into the caller. None: an older digest.
    place: str | None = None
    # The cores its live DataLoader workers used over its share window (v6): with its own shares,
    # what tells a straggler slowed by its data from one slowed by its own compute. None: not read.
    workers_cpu: float | None = None
    # The share of its share window its main thread waited on a run queue, runnable but not running
    # (v8): a straggler whose lag is the machine's (other processes on its CPUs), not its own work.
    # None: not read (a kernel without schedstat, an older digest).
    runqueue: float | None = None
    # In process-group setup: the store its environment points it at (MASTER_ADDR:MASTER_PORT), and
    # whether one of its sockets is connected there (None: not in setup, or its sockets not read);
    # which start of the job it belongs to (TORCHELASTIC_RESTART_COUNT).
    store: str | None = None
    store_reached: bool | None = None
    generation: int = 0
    # What proves it (or one of its workers) can never step again (v9); None: no proof, the
    # threshold judges it.
    proof: Proof | None = None

    @property
    def exit_told(self) -> bool:
        return self.exit_code is not None or self.exit_signal is not None

    @property
    def exit_failed(self) -> bool:
        return self.exit_signal is not None or self.exit_code not in (None, 0)


class NodeDigest(msgspec.Struct, frozen=True, gc=False):
    version: int
    first: float                   # the node's first and last sample times
    last: float
    ranks: tuple[RankDigest, ...]
    collective_steps: tuple[float, ...] = ()    # Flight Recorder completions (signs of progress)
    # When the job's output printed a step it had not printed before (v6: signs of progress too).
    output_steps: tuple[float, ...] = ()
    # The oldest collective a rank's Flight Recorder shows pending: (created, rank, op); None: none.
    fr_pending: tuple[float, int | None, str] | None = None
    group_world_size: int | None = None         # nodes in the job, as torchrun told the ranks


