"""hangdoc's vocabulary: the words a capture, a digest and a report share, as str enums."""
from __future__ import annotations

import enum

class Word(str, enum.Enum):
    """A word of hangdoc's vocabulary: a str enum that reads as its value everywhere (f-strings,
    str(), JSON) and equals the plain string, so bundles and reports keep their JSON."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Verdict(Word):
    HANG = "hang"
    SUSPECT = "suspect"            # split, and not yet seen long enough to tell a hang from a slow step
    SLOW = "slow"                  # it moves, but a straggler (or its data) costs every step a large share
    HEALTHY = "healthy"
    CRASH = "crash"
    ENDED = "ended"                # every rank gone, and nothing says whether it failed
    INTERRUPTED = "interrupted"    # the watch was stopped before a verdict

    @property
    def failed(self) -> bool:
        """A hang or a crash: the verdicts that fail a run, alarm a report and end a watch at once."""
        return self in (Verdict.HANG, Verdict.CRASH)


class GpuActivity(Word):
    """What a GPU's busy reading means, from utilisation, memory traffic and power together."""

    IDLE = "idle"                  # no kernel running
    BUSY = "busy"                  # kernels running and drawing more than an idle GPU does
    SPIN = "spin"                  # a kernel always running, at an idle GPU's power and no memory traffic:
                                   # a wait that spins (an NCCL kernel waiting for its peers), not work


class StopReason(Word):
    """Why a watch stopped sampling."""

    HANG = "hang"
    CRASH = "crash"
    SLOW = "slow"                  # slow, the same way, for report/judge.py's SLOW_SETTLED rounds and seconds
    ENDED = "ended"                # the job's ranks are gone, or the command hangdoc ran ended
    TIMEOUT = "timeout"            # --timeout passed
    INTERRUPTED = "interrupted"    # Ctrl-C or SIGTERM


class Ending(Word):
    """How the evidence a verdict is made from came to an end (`report/judge.py: judge`)."""

    RUNNING = "running"                # a watch round: the job goes on
    ENDED = "ended"                    # the job's ranks are gone, or the command hangdoc ran ended
    TIMED_OUT = "timed out"            # --timeout passed
    INTERRUPTED = "interrupted"        # Ctrl-C or SIGTERM stopped the watch
    COMMAND_EXITED = "command exited"  # `run`'s command ended before any rank could be watched
    DUMPS_ONLY = "dumps only"          # Flight Recorder dumps alone, no live capture


class SlowKind(Word):
    """Why a job that moves is slow (analyze/slow.py)."""

    STRAGGLER = "straggler"            # one rank (or a few) late every step: the others wait for it
    DATA_BOUND = "data-bound"          # every rank waits on its data


class SplitCause(Word):
    """Why ranks that wait in different collectives parted ways (analyze/divergence.py)."""

    HANDLER_COLLECTIVE = "handler-collective"    # an exception handler runs a collective on the rank that raised
    SWALLOWED_EXCEPTION = "swallowed-exception"  # a handler swallowed an exception and skipped a collective
    OWN_DECISION = "own-decision"                # a branch or early exit decided on one rank's own values
    CLOCK_DECISION = "clock-decision"            # ... decided on one rank's own clock
    RANK_BRANCH = "rank-branch"                  # a collective inside `if rank == 0:`
    WRAPPER_ON_ONE_RANK = "wrapper-on-one-rank"  # a DDP/FSDP-wrapped model called on one rank
    EARLY_RETURN = "early-return"                # a function that returns early on some ranks
    UNEVEN_DATA = "uneven-data"                  # a rank's data ran out first
    SKIPPED = "skipped"                          # a rank skipped the collective, why unseen
    UNKNOWN = "unknown"


class Engine(Word):
    """How stacks are read."""

    AUTO = "auto"                      # py-spy when installed, else pystack
    PY_SPY = "py-spy"
    PYSTACK = "pystack"


class RankState(Word):
    COLLECTIVE = "collective-wait"
    DATALOADER = "dataloader-wait"
    COMPUTE = "compute"
    IO = "io"
    IDLE = "idle"
    EXITED = "exited"
    UNKNOWN = "unknown"


class WorkerState(Word):
    DECOMPRESSING = "decompressing"
    DECODING = "decoding"
    READING = "reading"
    LOCK_WAIT = "lock-wait"
    QUEUE_PUT = "queue-put"
    BLOCKED = "blocked"      # in a system call on a file that does not return (an open on a dead mount)
    IDLE = "idle"            # waiting on its index queue for work
    BUSY = "busy"            # running dataset code
    EXITED = "exited"
    UNKNOWN = "unknown"


class Wait(Word):
    """What a rank or worker sleeps on outside collectives and its DataLoader: a Reading's detail
    (its state stays a wait: `idle`, or `lock-wait` for a worker on a file lock)."""

    DEBUGGER = "pdb prompt"          # pdb / bdb / cmd reading stdin: a breakpoint() left in
    FILE_LOCK = "file lock"          # flock / fcntl / lockf: another process holds the file
    CHILD = "subprocess wait"        # subprocess.run, Popen.wait, os.waitpid: a child never ends
    THREAD = "thread handoff"        # queue.Queue.get / Event.wait / Condition.wait fed by a thread
    STOPPED = "stopped (SIGSTOP)"    # state T: kill -STOP, Ctrl-Z, a job-control stop; it runs no code at all
    SPIN = "spin at a sync line"     # burns CPU at one line of the job, counters still, while the job stands:
                                     # a host waiting at its next sync (`.item()`) on a collective queued on the GPU


class ProofKind(Word):
    """What proves a hang before its threshold passes (`analyze/proofs.py`), most telling first."""

    STOPPED = "stopped"              # state T: the rank or a worker it waits on runs no code at all
    FORK_LOCK = "fork-lock"          # a forked worker waits on a lock no thread of its own can release
    LOCK_CYCLE = "lock-cycle"        # processes of the job each wait for a file lock the next one holds, round to the first
    PDB_PROMPT = "pdb-prompt"        # pdb's prompt reads stdin, the same line at every sample
    DEAD_PRODUCER = "dead-producer"  # a wait on a queue or event whose feeding thread is gone
    PIPE_NO_WRITER = "pipe-no-writer"  # a read on a pipe whose write end only itself, or processes stuck on it, hold
    PEER_GONE = "peer-gone"          # a collective whose peer rank left cleanly (code 0), or closed its connection


class Progress(Word):
    ACTIVE = "active"        # it stepped at the last sample
    SLOW = "slow"            # no step, but it or its workers are busy
    STUCK = "stuck"          # nothing moved


class Role(str, enum.Enum):
    LAUNCHER = "launcher"
    RANK = "rank"
    WORKER = "worker"      # a DataLoader worker (its stack runs `_worker_loop`)
    CHILD = "child"        # any other child of a rank: a pipe, a checkpoint writer



class Severity(str, enum.Enum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for the worst: findings are listed, and --fail-on compared, in this order."""
        return ("critical", "warning", "info").index(self.value)
