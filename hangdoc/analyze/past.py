"""What the system already knew about the job's past when hangdoc arrived. Pure.

Users attach after they have noticed: the job may have been stuck for minutes before the first
sample. The kernel keeps, per thread, when it last ran (the scheduler's `se.exec_start`, read
as `ThreadCounters.off_cpu_s` before the first stack dump wakes anything). A rank whose main
thread has not run for 847 s while it sits in `all_reduce` has waited there, off the CPU, for
847 s: no collective it takes part in has completed since, so no step has either.

That is a fact about the waiting ranks. Whether the job is hung depends on the others: a rank
still computing may be in a long step (a validation pass, a slow batch), and only its rhythm can
tell (the learned threshold of `progress.py`). But when every live rank outside the wait is
asleep too (no step, no CPU, no bytes, no new frame since hangdoc's first sample of it, nor in
its workers or children), nothing will end the wait: the job is hung, and has been for at least
as long as the waiting has lasted. That is named after CONFIRM_SAMPLES samples, once the wait
is older than the threshold (given, learned, or PAST_HANG_AFTER_S).

When a rank outside the wait still works (its workers decompress, it computes), the wait is no
proof; but its age is: no step for that long is what the rhythm rule counts, from the wait's
start instead of the first sample, as a watch attached earlier would have (the default 60 s, or
--hang-after). Except in a pause: ranks waiting in a barrier or a broadcast (not the step's
own collectives) while one computes are a validation pass or a checkpoint, however long, and
keep the rule from the first sample.

On NCCL a waiting rank's main thread may spin at a sync point instead of sleeping: its
off-CPU time is then near zero and the kernel's evidence is absent (never wrong); the wait is then
dated from hangdoc's own first sample, which found it there, and the rule above applies from it:
with every rank outside the wait asleep, a hang once it is PAST_HANG_AFTER_S old. Unless the ranks
outside the wait are all off the CPU since before that sample: the collective it spins on needs
them, and a main thread that has not run since t has issued nothing since t, so the wait is dated
from the latest of their last runs (`told_by` "peers"), as it would be had the waiters slept.
A waiter that burns CPU while watched is a spinner whatever the kernel said of its first sample
(preempted a moment as it was read): the kernel dates only a wait that sleeps. The Flight
Recorder stands in where its dumps are read: the oldest collective a rank enqueued and that has
not completed was created when its wait began (`flight.fr_pending`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

from hangdoc.analyze.progress import HANG_FLOOR_S
from hangdoc.analyze.shares import is_step_wait
from hangdoc.model import Progress, RankDigest, RankState

# A wait this old, with every other rank asleep, is a hang (no --hang-after, no rhythm): the floor a
# learned rhythm never goes under. The rhythm calls 10 s of quiet a hang on the strength of steps
# seen 3x as often; here the kernel has dated the wait and every other rank, its workers and its
# children have done nothing since hangdoc's first sample of them, for CONFIRM_SAMPLES samples.
PAST_HANG_AFTER_S = HANG_FLOOR_S
CONFIRM_SAMPLES = 3        # samples that must agree nothing moves now
_COLLECTIVE = RankState.COLLECTIVE     # read once: an enum member's lookup, a million times, is a tenth of a second


@dataclass(frozen=True)
class Before:
    """The longest wait already under way when hangdoc arrived: since when the rank that has
    waited longest sat there off the CPU (a lower bound: no step of the job since), which rank,
    in what; and whether every live rank outside the wait is asleep (the verdict may use it)."""

    since: float
    rank: int | None
    wait: str | None
    others_asleep: bool
    told_by: str = "kernel"      # "kernel" (its main thread's off-CPU time), "flight-recorder", "watch"
                                 # (on the CPU at the first sample, spinning: dated from that sample), or
                                 # "peers" (dated by the ranks outside the wait, off the CPU since)


def waiting(rank: RankDigest) -> bool:
    return rank.state == RankState.COLLECTIVE or bool(rank.joining)


def gone_at(rank: RankDigest) -> float | None:
    """When the rank exited: its exit record's time (the moment it died, when a pidfd told),
    else the first sample that found it gone."""
    return rank.exit_time if rank.exit_time is not None else rank.exited_at


def gone(rank: RankDigest) -> bool:
    return gone_at(rank) is not None


def live_ranks(ranks: Sequence[RankDigest]) -> list[RankDigest]:
    """The ranks not gone, in a pass that makes no call a rank: a job's million ranks are read so."""
    return [r for r in ranks if r.exit_time is None and r.exited_at is None]


def gone_ranks(ranks: Sequence[RankDigest]) -> list[RankDigest]:
    """The ranks gone (`gone_at`), as `live_ranks` reads them."""
    return [r for r in ranks if r.exit_time is not None or r.exited_at is not None]


def before_attach(ranks: Sequence[RankDigest], quiet_since: float, first: float,
                  fr_pending: tuple[float, int | None, str] | None = None) -> Before | None:
    """The wait already under way at the first sample, when the kernel (or the Flight Recorder's
    oldest pending collective) told it and nothing stepped while watched; None otherwise. A
    waiting rank counts when it has sat in the same wait since its first sample."""
    if quiet_since > first:
        return None        # something stepped (or did I/O of its own) while watched
    live = live_ranks(ranks)
    waits: list[RankDigest] = []
    others: list[RankDigest] = []
    for r in live:      # `waiting`, without a call a rank
        (waits if r.state == _COLLECTIVE or r.joining else others).append(r)
    steady = [r for r in waits if r.last_ran is not None and r.first_seen is not None
              and _same_wait_since(r) <= r.first_seen]
    # Off the CPU before the first sample: the kernel dates the wait. On the CPU (a host spinning on
    # its collective's Work, NCCL's shape): the watch saw it there from its first sample on.
    found = [(r.last_ran, r.rank, r.joining or r.detail, "kernel") if _off_cpu_before(r) and r.still
             else (r.first_seen, r.rank, r.joining or r.detail, "watch") for r in steady]
    if fr_pending is not None and fr_pending[0] < first and any(_same_wait_since(r) <= first for r in waits):
        found.append((*fr_pending, "flight-recorder"))
    if not found:
        return None
    since, rank, wait, told_by = min(found, key=itemgetter(0))
    others_asleep = all(asleep(r) for r in others)
    if told_by == "watch" and others and others_asleep:
        # A spinner's wait needs the ranks outside it: a main thread that has not run since t has
        # issued no collective since t, so no step of the job has ended since (but the one whose
        # collective it had issued). Dated so, the spinners' wait reads as the sleepers' would.
        ran = [r.last_ran for r in others if _off_cpu_before(r)]
        if len(ran) == len(others) and max(ran) < since:
            since, told_by = max(ran), "peers"
    return Before(since, rank, wait, others_asleep, told_by)


def _off_cpu_before(rank: RankDigest) -> bool:
    """The kernel read the rank's main thread off the CPU when hangdoc first read its stack."""
    return rank.last_ran is not None and rank.first_seen is not None and rank.first_seen - rank.last_ran > 0


def _same_wait_since(rank: RankDigest) -> float:
    if rank.state == RankState.COLLECTIVE and rank.blocked_since is not None:
        return rank.blocked_since
    return rank.state_since


def asleep(rank: RankDigest) -> bool:
    """Nothing of the rank worked since hangdoc first sampled it: no step, no new frame, next to
    no CPU and bytes in it, its live workers and its children (RankDigest.still), and it is not
    in the job's own code computing (on a GPU, a rank can sleep while its kernels run)."""
    return (rank.still and rank.progress != Progress.ACTIVE
            and rank.state not in (RankState.COMPUTE, RankState.IO, RankState.UNKNOWN))


def a_pause(ranks: Sequence[RankDigest], before: Before) -> bool:
    """The longest wait is in a collective outside the training step (a barrier, a broadcast) while a
    live rank outside the wait computes or writes: a validation pass, a checkpoint. (Never when
    every rank outside the wait is asleep: asleep ranks neither compute nor write.)"""
    if is_step_wait(before.wait):
        return False
    return any(r.state in (RankState.COMPUTE, RankState.IO) for r in ranks if not gone(r) and not waiting(r))


def confirmed(ranks: Sequence[RankDigest]) -> bool:
    """Enough samples agree that nothing moves now."""
    return max((r.points for r in ranks), default=0) >= CONFIRM_SAMPLES


def hang_after(source: str, threshold_s: float, others_asleep: bool) -> float:
    """How old a wait must be to be a hang: a given or learned threshold stands; with every other
    rank asleep PAST_HANG_AFTER_S, and with one still working the default threshold itself."""
    return PAST_HANG_AFTER_S if others_asleep and source not in ("given", "learned") else threshold_s
