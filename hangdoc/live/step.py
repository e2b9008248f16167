"""A watch round as a pure step: what was seen this round, and the state the rounds before left,
give the judgement, the state for the next round and what to do next.

    watch_step(state, seen, policy) -> (state, judgement, decision)

Everything a round reads of the world (the job's processes, stacks, output, the exits, the job's
own records, the clock) is in `Seen`, gathered by `live/watcher.py` through its probes; nothing
here reads a file, a clock or a process. So a round can be recorded (`bundle/recording.py`) and
run again (`live/replay.py`) to the same verdict at the same round.

The state holds the last judgement and the analysis's timelines (`LiveTimelines`, a cache the
analysis extends round to round: the same rounds in the same order build the same cache).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from hangdoc.analyze.restarts import restarts_of
from hangdoc.analyze.timeline import LiveTimelines
from hangdoc.base.defaults import INTERVAL_S
from hangdoc.model import Bundle, Ending, Job, Progress, Snapshot, StopReason, Verdict
from hangdoc.report.judge import RUNNING, End, Judgement, judge

LAUNCHER_EXIT_WAIT_S = 10.0   # ranks gone with their statuses unread: how long the launcher's exit is awaited
HURRY_ROUNDS = 8              # rounds taken soon in one quiet at most: then the interval again
# A quiet this share of the longest step seen is overdue: a job that steps between every two samples
# shows steps an interval apart (its longest about the interval and its jitter), and the first
# sample after it stopped already finds it quiet for about an interval.
OVERDUE = 0.75


@dataclass(frozen=True)
class Policy:
    """What decides when a watch stops, as the command was asked: the hang threshold (None: learned
    from the steps), the --timeout, and whether a settled slow verdict ends it (`watch`)."""

    hang_after_s: float | None = None
    timeout_s: float | None = None
    stop_when_slow: bool = False


@dataclass(frozen=True)
class Seen:
    """One round as the probes returned it.

    `bundle`: every sample so far and the records beside them (the job's output, the exits, the
    job's own Flight Recorder records); `at_s`: seconds since the watch began; `ended`: the command
    hangdoc started has ended (`run`); `probes_due`: the sampling policy would read a blocked
    worker's native frames next round; `own_records`: the job keeps records of its own (a Flight
    Recorder, NCCL's RAS) to ask for once it looks stuck. The last two matter only on the round a
    hang is named: a watch hands them as `Fact`s, read only when the step asks."""

    bundle: Bundle
    at_s: float
    ended: bool = False
    probes_due: bool | Fact = False
    own_records: bool | Fact = False


class Fact:
    """A fact of the round read only if the step asks for it, and then once: what it costs (a stat
    of each rank's dump files, a pass over the workers) is not paid on the rounds that need none."""

    def __init__(self, read: Callable[[], bool]):
        self._read = read
        self.value: bool | None = None     # None: never asked (a recording writes it so)

    def __bool__(self) -> bool:
        if self.value is None:
            self.value = bool(self._read())
        return self.value


def asked(fact: bool | Fact) -> bool | None:
    """What a round's fact was when the step read it; None when it never did."""
    return fact.value if isinstance(fact, Fact) else fact


@dataclass(frozen=True)
class State:
    """What a round leaves the next: the last judgement, whether a hang was held a round for a
    native probe already (once a watch), the rounds judged, and the analysis's timelines."""

    judgement: Judgement | None = None
    held_for_probe: bool = False
    rounds: int = 0
    live: LiveTimelines = field(default_factory=LiveTimelines, compare=False, repr=False)
    hurried: tuple[float, int] | None = None   # (the quiet's start, rounds taken soon in it)

    @property
    def stuck(self) -> bool:
        """The last round read a hang, or a rank stuck: the job's own records (Flight Recorder
        dumps, NCCL RAS) are asked for at the next round's reading."""
        prior = self.judgement
        return prior is not None and (prior.report.verdict == Verdict.HANG
                                      or any(r.progress == Progress.STUCK for r in prior.report.ranks))


@dataclass(frozen=True)
class Decision:
    """What the round decided: stop (and why), or go on. A hang named before the job's own records
    were asked for (`flight_due`), or before a blocked worker's native frames were read
    (`probe_due`), waits one round for them, taken at once."""

    stop: StopReason | None
    flight_due: bool = False
    probe_due: bool = False
    soon: bool = False       # a quiet past most of the job's longest step (`overdue`): the next round comes sooner

    @property
    def at_once(self) -> bool:
        """The next round is taken without the interval's wait."""
        return self.flight_due or self.probe_due


def watch_step(state: State, seen: Seen, policy: Policy) -> tuple[State, Judgement, Decision]:
    """One round: judge what was seen, and decide whether the watch stops here."""
    bundle = seen.bundle
    judgement = judge(bundle, RUNNING, state.judgement, hang_after=policy.hang_after_s, live=state.live,
                      lanes=False)
    hang = judgement.stop is StopReason.HANG
    flight_due = hang and not state.stuck and bool(seen.own_records)
    # Once a watch: a worker blocked at a new stack every round must not hold the hang for ever.
    probe_due = hang and not state.held_for_probe and bool(seen.probes_due)
    reason = None if flight_due or probe_due else judgement.stop
    if reason is None and policy.stop_when_slow and judgement.settled_slow:
        reason = StopReason.SLOW
    if reason is None and (all_gone(bundle, judgement) or seen.ended):
        reason = StopReason.ENDED
    if reason is None and policy.timeout_s is not None and seen.at_s >= policy.timeout_s:
        reason = StopReason.TIMEOUT
    hurried = overdue(judgement, bundle.last.time, state.hurried) if reason is None else None
    soon = hurried is not None and hurried != state.hurried
    after = State(judgement, state.held_for_probe or probe_due, state.rounds + 1, state.live, hurried)
    return after, judgement, Decision(reason, flight_due, probe_due, soon)


def overdue(judgement: Judgement, now: float, hurried: tuple[float, int] | None) -> tuple[float, int] | None:
    """A quiet older than most of the job's longest step (OVERDUE; with no step seen, the default
    interval) and not yet a verdict: the next round comes sooner (HURRY_ROUNDS at most a quiet), so
    that what may prove a hang (a process stopped, a worker on a lock, a prompt) is read again, and
    agrees, seconds earlier than at the interval. (The quiet's start, the rounds taken soon in it,
    this one counted); None: no such quiet, or its rounds spent."""
    diagnosis = judgement.diagnosis
    rhythm = diagnosis.rhythm if diagnosis is not None else None
    if rhythm is None or judgement.report.verdict.failed:
        return None
    usual = OVERDUE * rhythm.longest_step_s if rhythm.longest_step_s else min(rhythm.threshold_s / 3, INTERVAL_S)
    quiet = now - rhythm.quiet_since
    if not usual < quiet < rhythm.threshold_s:
        return None
    taken = hurried[1] if hurried is not None and hurried[0] == rhythm.quiet_since else 0
    return (rhythm.quiet_since, taken + 1) if taken < HURRY_ROUNDS else hurried


def watch_ending(reason: StopReason, policy: Policy) -> End:
    """How a watch's evidence ended, for the judgement it ends with: a --timeout, or still running."""
    return End(Ending.TIMED_OUT, timeout_s=policy.timeout_s) if reason is StopReason.TIMEOUT else RUNNING


def all_gone(bundle: Bundle, judgement: Judgement | None = None) -> bool:
    """Every rank gone, and no launcher about to start them again (torchrun restarting a failed
    generation: its next one is found by the next rounds' rediscovery). The restarts are the ones
    the judgement's analysis worked out of this bundle, when it has them."""
    if any_rank_alive(bundle.last, bundle.job):
        return False
    analysis = judgement.analysis if judgement is not None else None
    worked = analysis.worked if analysis is not None else None
    restarts = worked.restarts if worked is not None else restarts_of(bundle)
    if restarts is not None and restarts.pending:
        return False
    return not launcher_tells(bundle)


def launcher_tells(bundle: Bundle) -> bool:
    """The ranks' exit statuses went unread (their launcher reaped them at once) and the launcher
    still lives: its own exit, a moment later, tells how the job ended (waited for up to
    LAUNCHER_EXIT_WAIT_S after the last rank)."""
    launcher = bundle.job.launcher_pid
    sample = bundle.last.sample_of(launcher) if launcher is not None else None
    if sample is None or not sample.alive:
        return False
    records = [bundle.exit_of(p.pid) for p in bundle.job.ranks]
    if all(r is not None and r.told for r in records):
        return False
    last = max((r.time for r in records if r is not None), default=bundle.last.time)
    return bundle.last.time - last < LAUNCHER_EXIT_WAIT_S


def any_rank_alive(snapshot: Snapshot, job: Job) -> bool:
    """Some rank of `job` was sampled alive in `snapshot`."""
    return any((s := snapshot.sample_of(p.pid)) is not None and s.alive for p in job.ranks)


def ending_dict(ending: End) -> dict:
    """An ending as a recording keeps it (plain JSON)."""
    return {f.name: (getattr(ending, f.name).value if f.name == "kind" else getattr(ending, f.name))
            for f in dataclasses.fields(ending)}


def ending_of(data: dict) -> End:
    """An ending read back from a recording; what it does not name keeps End's default."""
    names = {f.name for f in dataclasses.fields(End)}
    values = {k: v for k, v in data.items() if k in names}
    if "kind" in values:
        values["kind"] = Ending(values["kind"])
    for key in ("output_tail", "outlived"):
        if key in values:
            values[key] = tuple(str(v) for v in values[key] or ())
    return End(**values)
