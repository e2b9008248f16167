"""Which DataLoader workers are live, which ended as they should, and which died: pure.

A DataLoader forks its workers together when an iterator starts (a *generation*: every epoch
with `persistent_workers=False`, every validation pass) and shuts them down together when that
iterator ends. A worker gone from /proc is therefore *retired*, not dead, when the bundle
shows a normal end:
- its exit record says it exited with status 0;
- a newer worker of its rank was forked after it was last seen alive (a new epoch, a new loader);
- its rank stepped after it was gone (its rank's loop did not need it);
- every worker of its generation ended within END_WINDOW_S of it (the iterator shut them down);
- it ended with its rank.
It is *dead* when PyTorch's log line names it (`killed by signal`, `exited unexpectedly`), when
its exit record names a fatal signal, when it went alone (a sibling of its generation
outlived it), unreplaced, while its rank waited for data without stepping since, or when its own
dying line (`ERROR: Unexpected segmentation fault encountered in worker.`) is one no rank's line
matches and it went first (`_dying_words`).
The report lists live and dead workers; retired ones are only counted.
"""
from __future__ import annotations

import dataclasses
import signal as signals
from bisect import bisect_left
from dataclasses import dataclass

from hangdoc.analyze.logs import failed_in_loader, worker_signals
from hangdoc.model.logline import killed_in_line
from hangdoc.analyze.progress import stepped
from hangdoc.analyze.timeline import Timeline, timelines
from hangdoc.model import Bundle, LogTail, ProcessInfo, RankState, Role, Word, WorkerState

# The workers of one iterator are forked one after another within a fraction of a second.
FORK_GAP_S = 1.0
# Workers shut down together are gone within a sample or two of each other.
END_WINDOW_S = 2.0
# Start times are counted from /proc/stat's btime, whole seconds: up to 1 s early against the
# sampling clock.
CLOCK_SLACK_S = 1.0
# A process the kernel killed for one of these did not end with its loader (TERM, INT and HUP
# are how launchers and iterators stop workers on purpose).
FATAL_SIGNALS = frozenset({signals.SIGKILL, signals.SIGSEGV, signals.SIGBUS, signals.SIGABRT,
                           signals.SIGILL, signals.SIGFPE})


class Fate(Word):
    LIVE = "live"          # alive at its last sample
    RETIRED = "retired"    # ended with its epoch, its loader or its rank
    DEAD = "dead"          # killed, or gone alone while its rank waits for it


@dataclass(frozen=True)
class WorkerFate:
    """One DataLoader worker of a rank and how it stands at the end of the bundle."""

    info: ProcessInfo
    fate: Fate
    generation: int                # 0: the rank's oldest fork of workers in the bundle, 1: the next, ...
    last_alive: float | None       # the last sample that saw it alive
    gone_at: float | None          # the first sample that saw it gone
    why: str                       # the sign that decided: "exited with status 0", "ended with its generation"
    how: str | None = None         # DEAD: "Killed", "Segmentation fault", "exited unexpectedly", "vanished"
    log: str | None = None         # DEAD by the log: the line that says so

    @property
    def pid(self) -> int:
        return self.info.pid


@dataclass(frozen=True)
class UntoldDeath:
    """A worker of the rank that its own dying line says a signal killed (`_dying_words`), that the
    samples cannot name: none of the rank's workers was seen alive (`among` empty: it died before the
    watch found it), or several went at the same sample (`among`: their pids)."""

    how: str                       # "Segmentation fault", "Bus error", "Floating point exception"
    line: str                      # the worker's line
    among: tuple[int, ...] = ()
    gone_at: float | None = None   # the sample that first saw those of `among` gone


@dataclass(frozen=True)
class RankWorkers:
    """A rank's DataLoader workers, oldest first, each with its fate."""

    rank_pid: int
    workers: tuple[WorkerFate, ...]
    untold: tuple[UntoldDeath, ...] = ()   # deaths the output tells that the samples cannot pin on one worker

    def of(self, fate: Fate) -> tuple[WorkerFate, ...]:
        return tuple(w for w in self.workers if w.fate is fate)

    @property
    def live(self) -> tuple[WorkerFate, ...]:
        return self.of(Fate.LIVE)

    @property
    def dead(self) -> tuple[WorkerFate, ...]:
        return self.of(Fate.DEAD)

    @property
    def retired(self) -> tuple[WorkerFate, ...]:
        return self.of(Fate.RETIRED)

    @property
    def shown(self) -> frozenset[int]:
        """The pids a report lists: live workers and dead ones."""
        return frozenset(w.pid for w in self.workers if w.fate is not Fate.RETIRED)

    @property
    def current(self) -> tuple[WorkerFate, ...]:
        """The workers a rank has now: the live ones; when none is alive (its job ended, or an
        epoch just ended), its newest generation."""
        if self.live:
            return self.live
        newest = max((w.generation for w in self.workers), default=None)
        return tuple(w for w in self.workers if w.generation == newest)

    def siblings(self, pid: int) -> tuple[WorkerFate, ...]:
        """The other workers of `pid`'s generation."""
        gen = next((w.generation for w in self.workers if w.pid == pid), None)
        return tuple(w for w in self.workers if w.generation == gen and w.pid != pid)


def worker_fates(bundle: Bundle, lines: dict[int, Timeline] | None = None) -> dict[int, RankWorkers]:
    """Rank pid -> its workers with their fates, for every rank of the bundle. Worked out once per
    bundle: the rules and the report ask for the same answer."""
    cached_bundle, answer = _KEPT
    if cached_bundle is bundle and answer is not None:
        return answer
    lines = timelines(bundle) if lines is None else lines
    killed = _killed(bundle.logs)
    exits = {e.pid: e for e in getattr(bundle, "exits", ()) if e.told}   # older bundles have none
    answer = {rank.pid: _rank_workers(bundle, rank, lines, killed, exits) for rank in bundle.job.ranks}
    if (said := worker_signals(bundle.logs)):
        answer = _dying_words(bundle, answer, said, killed, lines)
    _KEPT[:] = [bundle, answer]
    return answer


_KEPT: list = [None, None]


def workers_of_rank(bundle: Bundle, rank_pid: int, lines: dict[int, Timeline] | None = None) -> RankWorkers:
    return worker_fates(bundle, lines).get(rank_pid) or RankWorkers(rank_pid, ())


def _killed(logs: tuple[LogTail, ...]) -> dict[int, tuple[str, str]]:
    """pid -> (how, the log line) for every worker PyTorch says died."""
    out: dict[int, tuple[str, str]] = {}
    for tail in logs:
        for line in tail.lines:
            for pid, how, _ in killed_in_line(line):
                out.setdefault(pid, (how, line))
    return out


@dataclass(frozen=True)
class _Span:
    last_alive: float | None
    gone_at: float | None          # None: alive at its last sample


def _span(line: Timeline) -> _Span:
    """When the worker was last seen alive and first seen gone. Kept on its newest point: a live
    watch asks every round, and a worker long gone only adds points that say so."""
    points = line.points
    last = points[-1]
    known = last.memo.get("worker-span")
    if known is not None:
        return known
    if last.reading.state != WorkerState.EXITED:
        span = _Span(last.time, None)
    else:
        before = points[-2].memo.get("worker-span") if len(points) > 1 else None
        if (before is not None and before.gone_at is not None and before.last_alive is not None
                and before.last_alive >= points[0].time):
            span = before
        else:
            gone = line.run_start("worker-gone", lambda a, b: (a.reading.state == WorkerState.EXITED)
                                  == (b.reading.state == WorkerState.EXITED))
            i = bisect_left(points, gone, key=lambda p: p.time)
            span = _Span(points[i - 1].time if i > 0 else None, gone)
    last.memo["worker-span"] = span
    return span


def _generations(workers: list[ProcessInfo], spans: dict[int, _Span]) -> dict[int, int]:
    """pid -> generation: workers forked together by one iterator. A new generation begins with
    a worker index seen already, a member gone before the worker started, a pause in the forks,
    or a generation already num_workers strong."""
    out: dict[int, int] = {}
    members: list[ProcessInfo] = []
    gen = -1
    for w in sorted(workers, key=lambda p: (p.start_time, p.pid)):
        joins = bool(members) and (
            w.start_time - members[-1].start_time <= FORK_GAP_S
            and (w.worker_index is None or w.worker_index not in {m.worker_index for m in members})
            and (w.num_workers is None or len(members) < w.num_workers)
            and not any(spans[m.pid].gone_at is not None and spans[m.pid].gone_at <= w.start_time
                        for m in members))
        if not joins:
            gen += 1
            members = []
        members.append(w)
        out[w.pid] = gen
    return out


def _last_step_from(line: Timeline | None) -> float | None:
    """The earlier point of the rank's latest step (the rank stepped after this time)."""
    if line is None:
        return None
    fresh = [p for p in line.points if p.fresh]
    for prev, point in zip(reversed(fresh[:-1]), reversed(fresh[1:])):
        if stepped(prev, point):
            return prev.time
    return None


def _ended_together(a: _Span, b: _Span) -> bool:
    """Both gone, and some instant within END_WINDOW_S fits both ends."""
    if a.gone_at is None or b.gone_at is None or a.last_alive is None or b.last_alive is None:
        return False
    return max(a.last_alive, b.last_alive) - min(a.gone_at, b.gone_at) <= END_WINDOW_S


def _exit_sign(record) -> tuple[Fate, str, str | None] | None:
    """What the worker's exit record (a ProcessExit that tells its status) says, if it decides."""
    if record is None:
        return None
    if record.code == 0:
        return Fate.RETIRED, "exited with status 0", None
    if record.signal is not None and record.signal in FATAL_SIGNALS:
        name = signals.strsignal(record.signal) or f"signal {record.signal}"
        return Fate.DEAD, f"killed by signal {record.signal} ({name})", name
    return None


def _rank_workers(bundle: Bundle, rank: ProcessInfo, lines: dict[int, Timeline],
                  killed: dict[int, tuple[str, str]], exits: dict) -> RankWorkers:
    workers = [w for w in bundle.job.children_of(rank.pid) if w.role is Role.WORKER and w.pid in lines]
    spans = {w.pid: _span(lines[w.pid]) for w in workers}
    gens = _generations(workers, spans)
    rank_line = lines.get(rank.pid)
    rank_span = _rank_span(rank_line)
    last_step: list[float | None] = []   # worked out on first need

    def stepped_after(t: float) -> bool:
        if not last_step:
            last_step.append(_last_step_from(rank_line))
        return last_step[0] is not None and last_step[0] >= t

    members: dict[int, list[ProcessInfo]] = {}
    for w in workers:
        members.setdefault(gens[w.pid], []).append(w)
    # The latest fork after each generation: a worker forked after another was last seen took over.
    later: dict[int, float] = {}
    latest = float("-inf")
    for gen in sorted(members, reverse=True):
        later[gen] = latest
        latest = max(latest, max(w.start_time for w in members[gen]))
    fates = []
    for w in sorted(workers, key=lambda p: (gens[p.pid], p.worker_index is None, p.worker_index, p.pid)):
        span, gen = spans[w.pid], gens[w.pid]
        siblings = [spans[x.pid] for x in members[gen] if x.pid != w.pid]

        def fate(kind: Fate, why: str, how: str | None = None, log: str | None = None) -> WorkerFate:
            return WorkerFate(w, kind, gen, span.last_alive, span.gone_at, why, how, log)

        if span.gone_at is None:
            fates.append(fate(Fate.LIVE, "alive at its last sample"))
            continue
        if w.pid in killed:
            how, line = killed[w.pid]
            fates.append(fate(Fate.DEAD, "PyTorch's log line", how, line))
            continue
        told = _exit_sign(exits.get(w.pid))
        if told is not None:
            fates.append(fate(told[0], told[1], told[2]))
            continue
        seen = span.last_alive
        if seen is None:
            fates.append(fate(Fate.RETIRED, "never seen alive in the bundle"))
        elif later[gen] > seen - CLOCK_SLACK_S:
            fates.append(fate(Fate.RETIRED, "a newer worker of its rank was forked after it"))
        elif stepped_after(span.gone_at):
            fates.append(fate(Fate.RETIRED, "its rank stepped after it was gone"))
        elif siblings and all(_ended_together(span, s) for s in siblings):
            fates.append(fate(Fate.RETIRED, f"ended with the {len(siblings)} other worker(s) of its generation"))
        elif rank_span is not None and _ended_together(span, rank_span):
            fates.append(fate(Fate.RETIRED, "ended with its rank"))
        elif _waits_for_data_since(rank_line, span.gone_at):
            alone = "alone, its sibling(s) alive" if any(s.gone_at is None for s in siblings) else "alone"
            fates.append(fate(Fate.DEAD, f"gone {alone}, unreplaced, while its rank waits for data", "vanished"))
        else:
            fates.append(fate(Fate.RETIRED, "gone while its rank did not wait for it"))
    return RankWorkers(rank.pid, tuple(fates))


# Normal ends that no dying line overrides: the rank went on without the worker.
_WENT_ON = ("a newer worker of its rank was forked after it", "its rank stepped after it was gone")


def _dying_words(bundle: Bundle, answer: dict[int, RankWorkers], said: list[tuple[str, str]],
                 killed: dict[int, tuple[str, str]], lines: dict[int, Timeline]) -> dict[int, RankWorkers]:
    """The workers that died of the signal their own dying line names (`worker_signals`: no pid, no
    rank). A rank names the worker when it notices (`is killed by signal`: `killed`); a line no such
    line matches is a death the rank did not name, because it failed another way first (a batch cut
    off mid-handoff: ConnectionResetError). Such a death is the worker's that went first, before its
    rank and every sibling, where the watch saw one; where it saw none, the worker was of the rank
    whose own traceback was raised in its DataLoader's iterator (`UntoldDeath`), and where several
    of its workers went at the same sample, one of those. Nothing is named where the lines and the
    candidates do not pair up."""
    named = [how for how, _ in killed.values()]
    unclaimed = []
    for how, line in said:
        if how in named:
            named.remove(how)
        else:
            unclaimed.append((how, line))
    if not unclaimed:
        return answer
    candidates = []
    for rank_pid, rank in answer.items():
        if rank.workers:
            span = _rank_span(lines.get(rank_pid))
            candidates += [(rank_pid, w) for w in rank.workers if _went_first(w, rank, span, killed)]
    if candidates:
        if len({how for how, _ in unclaimed}) > 1 or len(candidates) > len(unclaimed):
            return answer      # which worker died of which signal, or which of them died: cannot tell
        how, line = unclaimed[0]
        told = {w.pid: dataclasses.replace(w, fate=Fate.DEAD, why="its own dying line, and it went first",
                                           how=how, log=line) for _, w in candidates}
        return {rank_pid: dataclasses.replace(rank, workers=tuple(told.get(w.pid, w) for w in rank.workers))
                for rank_pid, rank in answer.items()}
    failed = [r for r in failed_in_loader(bundle.logs)
              if not any(a.dead for pid, a in answer.items() if (info := bundle.job.info(pid)) and info.rank == r)]
    if not failed or len(failed) > len(unclaimed) or (len(failed) > 1 and len({h for h, _ in unclaimed}) > 1):
        return answer
    out = dict(answer)
    for rank, (how, line) in zip(failed, unclaimed):
        newest = max((p for p in bundle.job.ranks if p.rank == rank), key=lambda p: (p.start_time, p.pid), default=None)
        if newest is None:
            continue
        held = out.get(newest.pid) or RankWorkers(newest.pid, ())
        gone = [w for w in held.workers if _untold(w, killed)]
        if any(w.last_alive is not None for w in held.workers) and not gone:
            continue                  # its workers live, or ended for a reason: not one of those the line tells
        first = min((w.gone_at for w in gone), default=None)
        among = tuple(w.pid for w in gone if w.gone_at == first)
        out[newest.pid] = dataclasses.replace(held, untold=held.untold + (UntoldDeath(how, line, among, first),))
    return out


def _untold(w: WorkerFate, killed: dict) -> bool:
    """Gone, seen alive before, with nothing else to say why (no line, no exit status, no normal end)."""
    return not (w.fate is Fate.LIVE or w.gone_at is None or w.last_alive is None or w.pid in killed or w.log
                or w.why in _WENT_ON or w.why.startswith(("exited with status", "killed by signal")))


def _went_first(w: WorkerFate, rank: RankWorkers, rank_span: _Span | None, killed: dict) -> bool:
    """Gone, with nothing else to say why, before its rank and every sibling of its generation."""
    if not _untold(w, killed):
        return False
    if rank_span is not None and rank_span.gone_at is not None and rank_span.gone_at <= w.gone_at:
        return False
    return all(s.gone_at is None or s.gone_at > w.gone_at for s in rank.siblings(w.pid))


def _rank_span(line: Timeline | None) -> _Span | None:
    """When the rank was last seen alive and first seen gone; None while it lives."""
    if line is None or line.last.reading.state != RankState.EXITED:
        return None
    points = line.points
    gone = line.run_start("rank-gone", lambda a, b: (a.reading.state == RankState.EXITED)
                          == (b.reading.state == RankState.EXITED))
    i = bisect_left(points, gone, key=lambda p: p.time)
    return _Span(points[i - 1].time if i > 0 else None, gone)


def _waits_for_data_since(line: Timeline | None, since: float) -> bool:
    """The rank's last sample alive, at or after `since`, finds it waiting on its DataLoader."""
    if line is None:
        return False
    alive = [p for p in line.points if p.time >= since and p.reading.state != RankState.EXITED]
    return bool(alive) and alive[-1].reading.state == RankState.DATALOADER
