"""How the ranks ended, read for the verdict: their exit statuses where the watch read them
(`told_by_exits`), else what the samples and the job's output say (`crash_of`). Pure."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hangdoc.analyze.jobfacts import JobFacts
from hangdoc.analyze.logs import failed_worker_rank, killed_workers, says_failure, torchrun_root_cause
from hangdoc.analyze.past import gone_at, gone_ranks
from hangdoc.model import RankDigest

CRASH_GRACE_S = 5.0
_SIGTERM = 15      # what torchrun sends the other ranks once one failed


def ended_readably(facts: JobFacts) -> bool:
    """Whether a job whose ranks are all gone left anything that tells a good end from a crash:
    the launcher's exit code, or its output (where a crash leaves a traceback or torchrun's
    failure summary). Ranks vanishing with neither (output on a terminal, a launcher that is not
    hangdoc's child) are "ended, cause unknown", never "healthy"."""
    return facts.exit_code == 0 or any(line.strip() for tail in facts.logs for line in tail.lines)


@dataclass(frozen=True)
class Exits:
    """What the ranks' exit statuses say: a crash (culprit ranks, onset), or none so far."""

    crash: tuple[tuple[int, ...], float] | None
    ended_well: bool = False       # every rank exited with code 0


def told_by_exits(ranks: Sequence[RankDigest], facts: JobFacts) -> Exits | None:
    """The verdict the exit statuses give, or None where they do not decide: no exit records
    (an older bundle), a rank gone with its status unread and no failure read, ranks that exited
    0 under a launcher that failed. A rank that died by a signal or a non-zero code is the crash;
    the ranks that died after it (torchrun's SIGTERM tearing the job down, a peer's "Connection
    closed") are not culprits. Ranks that exited 0, however far apart, did not crash, unless one
    left while the others were still in the job and they failed for it (`facts.departure`): the
    first to leave is the culprit. A generation that failed with restarts left is no crash (the
    launcher starts the next); restarts used up, the crash is the last start's first failure (the
    earlier starts are its history)."""
    restarts = facts.restarts
    if restarts is not None and restarts.pending:
        return Exits(None, ended_well=True)
    if facts.departure is not None:      # the first to leave explains the failures that followed
        return Exits(((facts.departure.rank,), facts.departure.time))
    if restarts is not None and restarts.used_up and restarts.last is not None and restarts.last.time is not None:
        last = restarts.last      # what ended the job: the last start's own first failure
        return Exits(((last.rank,) if last.rank is not None else (), last.time))
    if not any(r.exit_time is not None for r in ranks):
        return None
    gone = sorted(gone_ranks(ranks), key=gone_at)
    failed = [r for r in gone if r.exit_failed]
    unread = [r for r in gone if not r.exit_told]
    if not failed:
        if unread and len(gone) == len(ranks) and facts.launcher_code == 0 and facts.exit_code in (None, 0):
            # The launcher reaped its ranks before their statuses could be read (srun, mpirun and a
            # script's own Popen.wait do at once) and itself exited 0: the job ended well.
            return Exits(None, ended_well=True)
        if unread or facts.exit_code not in (None, 0):
            return None
        return Exits(None, ended_well=len(gone) == len(ranks))
    first = gone_at(failed[0])
    earlier = [r for r in unread if gone_at(r) < first]
    if earlier:   # gone before the first failure read, its status unread: it went first
        onset = gone_at(earlier[0])
        root = torchrun_root_cause(facts.logs)
        culprits = (root.rank,) if root is not None else tuple(
            r.rank for r in earlier if gone_at(r) == onset and r.rank is not None)
        return Exits((tuple(culprits), onset))
    tied = [r for r in failed if gone_at(r) == first]
    # Read at one instant: a fatal signal is the likelier cause, an error exit next (a peer's
    # "Connection closed by peer"), SIGTERM last (the launcher's teardown).
    likely = min(map(_teardown_order, tied))
    causes = [r for r in tied if _teardown_order(r) == likely]
    return Exits((tuple(sorted(r.rank for r in causes if r.rank is not None)), first))


def _teardown_order(rank: RankDigest) -> int:
    if rank.exit_signal == _SIGTERM:
        return 2
    return 0 if rank.exit_signal is not None else 1


def crash_of(ranks: Sequence[RankDigest], facts: JobFacts) -> tuple[tuple[int, ...], float | None] | None:
    """(culprit ranks, onset) when the job crashed, None when it did not (or not yet), read
    from the samples and the logs: the bundle has no exit status that decides."""
    # Gone by a sample or by an exit record whose status went unread (a command reaped its ranks
    # after the last round saw them).
    exited = sorted(gone_ranks(ranks), key=gone_at)
    if not exited:
        return None
    logs = facts.logs
    failed = facts.exit_code not in (None, 0) or (facts.exit_code is None and says_failure(logs))
    some_alive = len(exited) < len(ranks)
    # Ranks of a job that ends well exit together; one gone for long while others live is a crash.
    if not failed and not (some_alive and facts.now - gone_at(exited[0]) >= CRASH_GRACE_S):
        return None
    onset = gone_at(exited[0])
    root = torchrun_root_cause(logs)
    if root is not None:
        return (root.rank,), onset
    dead_workers = killed_workers(logs)
    for rank in ranks:
        if rank.rank is not None and any(w.pid in dead_workers for w in rank.workers):
            return (rank.rank,), onset
    if (failed_rank := failed_worker_rank(logs)) is not None:   # the worker died before we saw it
        return (failed_rank,), onset
    first = [r.rank for r in exited if gone_at(r) == onset and r.rank is not None]
    return (tuple(first) if some_alive else ()), onset
