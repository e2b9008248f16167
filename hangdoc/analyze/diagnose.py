"""Hang, crash, suspect or healthy, and who everyone is waiting for: a pure function of the bundle.

The verdict is `hang` once no rank has stepped (its own loop moved on, `analyze/progress.py`)
nor done I/O of its own for the threshold (given, or learned from the job's step rhythm),
while some rank waits in a collective or nothing moves at all; sooner, once a fact proves it (a
rank or worker stopped, a forked worker on a lock no thread of its own holds, a pipe no process can
write, a pdb prompt, a wait whose feeding thread is gone, a collective whose peer left:
`analyze/proofs.py`) and no rank stepped since. The culprits are the ranks
outside the majority's collective (a straggler), or the ranks in a different collective
(a mismatch). `suspect`: the ranks are split (some wait in a collective for the others) and
the bundle cannot show them moving: one instant, or quiet for a third of the threshold and
longer than any step seen.
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter

from hangdoc.analyze.classify import Reading, parked_in, per_stack, place, signature
from hangdoc.analyze.culprits import culprits_of, outliers, spinning_at_waits, wait_spots
from hangdoc.analyze.departures import departure_of
from hangdoc.analyze.divergence import Divergence, divergence
from hangdoc.analyze.ending import crash_of, ended_readably, told_by_exits
from hangdoc.analyze.flight import fr_pending, fr_step_times
from hangdoc.analyze.logs import output_steps
from hangdoc.analyze.jobfacts import JobFacts, pg_timeout
from hangdoc.analyze.past import Before, a_pause, before_attach, confirmed, gone_at
from hangdoc.analyze.past import hang_after as past_hang_after
from hangdoc.analyze.progress import (
    PollLoop, Rhythm, blocked_since, held_since, poll_loop, progress_word, rank_progress, rhythm, started_up,
)
from hangdoc.analyze.shares import rank_shares, runqueue_share, workers_cpu
from hangdoc.analyze.slow import SlowCall, long_batch, slow_call
from hangdoc.analyze.rendezvous import joining, joining_since, setup_name, store_fields
from hangdoc.analyze.proofs import first_proof, named_culprits, proof_of
from hangdoc.analyze.restarts import newest_output, restarts_of
from hangdoc.analyze.timeline import Timeline, raw_points, still, timelines
from hangdoc.analyze.witnesses import job_witnesses
from hangdoc.base.parse import to_int
from hangdoc.base.words import rank_ranges
from hangdoc.model import (
    DIGEST_VERSION, Bundle, DigestWorker, Frame, NodeDigest, ProcessInfo, Proof, RankDigest, RankState, Role,
    ProcSample, Verdict, Wait, Witness, Word, WorkerState,
)


@dataclass(frozen=True)
class RankView:
    info: ProcessInfo
    reading: Reading
    state_since: float
    blocked_since: float | None
    progress: str
    workers: tuple[tuple[ProcessInfo, Reading, bool], ...]   # (worker, reading, alive)
    exited_at: float | None
    # The ranks this view stands for in a job diagnosed by class (its own rank and the ranks
    # of other nodes that look the same); empty: only its own.
    members: tuple[int, ...] = ()
    joining: Frame | None = None         # the process-group setup it waits in for every rank to join
    joining_since: float | None = None
    poll: PollLoop | None = None         # the poll or retry loop it goes round (no steps: a wait)

    @property
    def ranks(self) -> tuple[int, ...]:
        return self.members or ((self.info.rank,) if self.info.rank is not None else ())

    @property
    def count(self) -> int:
        return len(self.members) or 1

    @cached_property
    def rank_set(self) -> str | None:
        """The ranks of its class as ranges ("0-76,78-127"), worked out once; None: a rank alone."""
        return rank_ranges(self.members) if len(self.members) > 1 else None


@dataclass(frozen=True)
class Census:
    """Who a job diagnosed by class held: its views show one rank of each class. Its hosts and
    nodes are read from every rank's digest (`every`) when asked: a report names them only where
    ranks are missing, and a million ranks are two passes."""

    ranks: tuple[int, ...]
    every: Sequence[RankDigest] = field(repr=False, compare=False)
    nodes: int | None              # nodes in the job (GROUP_WORLD_SIZE), when torchrun said

    @cached_property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted(set(map(attrgetter("host"), self.every))))

    @cached_property
    def group_ranks(self) -> tuple[int, ...]:
        return tuple(sorted(set(map(attrgetter("group_rank"), self.every)) - {None}))


@dataclass(frozen=True)
class Diagnosis:
    verdict: Verdict
    culprits: tuple[int, ...]
    onset: float | None
    decided_at: float
    ranks: tuple[RankView, ...]
    mismatch: dict[str, tuple[int, ...]] = field(default_factory=dict)  # collective -> ranks
    frozen: bool = False               # a hang outside collectives: nothing moved at all
    rhythm: Rhythm | None = None       # how the threshold was set, and since when nothing stepped
    census: Census | None = None       # every rank seen, when the views stand for classes
    digest: NodeDigest | None = None   # the node's reading of its ranks, saved beside its samples
    before: Before | None = None       # the wait already under way when hangdoc arrived (past.py)
    from_past: bool = False            # the verdict leaned on it
    slow: SlowCall | None = None       # a straggler or data-bound job (slow.py); also on a job that ended well
    held: bool = False                 # the hang was named from no progress alone (`decide`)
    witnesses: tuple[Witness, ...] = ()   # what each witness of progress said while the job was quiet
    divergence: Divergence | None = None  # ranks in different collectives: where their paths parted, who left
    proof: Proof | None = None         # what proved the hang before its threshold passed (`proofs.py`)

    def view(self, rank: int) -> RankView | None:
        return next((r for r in self.ranks if rank in r.ranks), None)

    @cached_property
    def culprit_views(self) -> tuple[RankView, ...]:
        """The views holding a culprit, found once (a class's view holds a million ranks)."""
        return tuple(v for v in self.ranks if not set(self.culprits).isdisjoint(v.ranks))

    @property
    def waiting(self) -> tuple[RankView, ...]:
        return tuple(r for r in self.ranks if r.reading.state == RankState.COLLECTIVE)

    @staticmethod
    def count(views) -> int:
        """How many ranks the views stand for (a view of a class stands for many)."""
        return sum(v.count for v in views)

    @property
    def present(self) -> tuple[int, ...]:
        """Every rank the diagnosis saw."""
        return tuple(sorted(r for v in self.ranks for r in v.ranks))


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    culprits: tuple[int, ...] = ()
    onset: float | None = None
    mismatch: dict[str, tuple[int, ...]] = field(default_factory=dict)
    frozen: bool = False
    rhythm: Rhythm | None = None
    before: Before | None = None       # the wait already under way at the first sample
    from_past: bool = False            # the hang was named from that evidence, before the threshold passed
    slow: SlowCall | None = None       # the job moves, slowly: a straggler or its data (slow.py)
    held: bool = False                 # named from no progress alone: every rank held, none in a known wait
    spinning: tuple[int, ...] = ()     # with it: the ranks standing at one line, read as waiting there
    proof: Proof | None = None         # the hang was named from a proof, not the threshold (proofs.py)


def diagnose(bundle: Bundle, hang_after: float | None = None, lines: dict[int, Timeline] | None = None) -> Diagnosis:
    """`hang_after` overrides the bundle's own; with neither, the threshold is learned.
    `lines`: the bundle's timelines when the caller keeps them (a live watch)."""
    lines = timelines(bundle) if lines is None else lines
    views = rank_views(bundle, lines)
    digest = digest_of(bundle, lines, views)
    decision = decide(digest.ranks, job_facts(bundle, digest, hang_after))
    diagnosis = diagnosis_of(decision, bundle.last.time, views, digest=digest)
    if decision.verdict in (Verdict.HANG, Verdict.SUSPECT) and len(decision.mismatch) >= 2:
        split = divergence(bundle, decision.mismatch)
        if split is not None:
            diagnosis = dataclasses.replace(diagnosis, culprits=split.left, divergence=split)
    if decision.verdict in (Verdict.HANG, Verdict.SUSPECT) and decision.rhythm is not None:
        since = min(decision.rhythm.quiet_since, decision.onset or decision.rhythm.quiet_since)
        ranks = [(v.info.rank, lines[v.info.pid]) for v in views if v.exited_at is None]
        workers = [lines[w.pid] for v in views for w, _, alive in v.workers if alive and w.pid in lines]
        outputs = [(s.time, s.output_step) for s in bundle.samples]
        diagnosis = dataclasses.replace(diagnosis, witnesses=job_witnesses(ranks, workers, since, outputs))
    return diagnosis


def diagnosis_of(decision: Decision, now: float, views: Sequence[RankView], digest: NodeDigest | None = None,
                 census: Census | None = None) -> Diagnosis:
    """The diagnosis a decision makes of these views: one node's (with its digest), or a job's by
    class (with its census). Ranks the decision found spinning at a sync line read as waiting there."""
    if decision.spinning:
        spun = set(decision.spinning)
        views = [dataclasses.replace(v, reading=Reading(RankState.COLLECTIVE, Wait.SPIN, v.reading.frame),
                                     blocked_since=decision.onset)
                 if set(v.ranks) & spun and v.reading.state == RankState.COMPUTE else v for v in views]
    return Diagnosis(decision.verdict, decision.culprits, decision.onset, now, tuple(views), decision.mismatch,
                     decision.frozen, decision.rhythm, census=census, digest=digest, before=decision.before,
                     from_past=decision.from_past, slow=decision.slow, held=decision.held, proof=decision.proof)


def job_facts(bundle: Bundle, digest: NodeDigest, hang_after: float | None) -> JobFacts:
    restarts = restarts_of(bundle)
    # Ranks the launcher started again are quiet from their start, not from the first sample.
    began = restarts.began if restarts is not None else None
    first = max(bundle.samples[0].time, began) if began is not None else bundle.samples[0].time
    return JobFacts(first, bundle.last.time, newest_output(bundle, restarts), bundle.exit_code,
                    hang_after if hang_after is not None else bundle.options.hang_after_s,
                    digest.collective_steps + digest.output_steps, digest.fr_pending, restarts, _launcher_code(bundle),
                    departure_of(bundle), pg_timeout(bundle))


def _launcher_code(bundle: Bundle) -> int | None:
    record = bundle.exit_of(bundle.job.launcher_pid) if bundle.job.launcher_pid is not None else None
    return record.code if record is not None and record.signal is None else None


def rank_views(bundle: Bundle, lines: dict[int, Timeline]) -> list[RankView]:
    """A view of every rank that has a timeline, with its workers'."""
    views = []
    for rank in bundle.job.ranks:
        line = lines.get(rank.pid)
        if line is None:
            continue
        workers = [w for w in bundle.job.children_of(rank.pid) if w.role is Role.WORKER]
        worker_lines = [lines[w.pid] for w in workers if w.pid in lines]
        worker_states = tuple(
            (w, lines[w.pid].last.reading, lines[w.pid].last.reading.state != WorkerState.EXITED)
            for w in workers if w.pid in lines
        )
        exited_at = next((p.time for p in line.points if p.reading.state == RankState.EXITED), None)
        since = joining_since(line)
        setup = joining(line.last) if since is not None else None
        poll = poll_loop(line)
        reading = _plain_reading(line, setup, poll, bundle.last.sample_of(rank.pid))
        views.append(RankView(rank, reading, line.state_since(), blocked_since(line),
                              progress_word(line, worker_lines), worker_states, exited_at,
                              joining=setup, joining_since=since, poll=poll))
    return views


def _plain_reading(line: Timeline, setup: Frame | None, poll: PollLoop | None,
                   sample: ProcSample | None) -> Reading:
    """The rank's reading, said plainly where the classifier left only a function's name: a rank
    in process-group setup waits in the setup call (`init_process_group`), a rank in a poll loop
    in that loop's wait, at the job's own line. A wait the classifier named (a Word) is kept."""
    reading = line.last.reading
    if isinstance(reading.detail, Word) or (setup is None and poll is None):
        return reading
    if setup is not None:
        return Reading(reading.state, setup_name(setup), setup)
    wait = parked_in(sample)
    own = next((f for f in line.last.sig if f.is_job_code), reading.frame)
    return Reading(reading.state, f"a poll loop ({wait})" if wait else "a poll loop", own)


def decide(ranks: Sequence[RankDigest], facts: JobFacts) -> Decision:
    """The verdict from the ranks' digests: one node's, or every node's of a job."""
    now = facts.now
    beat = rhythm([r.rhythm for r in ranks], facts.first, facts.hang_after, list(facts.collective_steps))
    if facts.restarts is not None and facts.restarts.restarted:
        # The ranks are the newest start's: the rhythm, its start-up included, is that start's own.
        beat = dataclasses.replace(beat, start=facts.restarts.generation)
    told = told_by_exits(ranks, facts)
    crash = told.crash if told is not None else crash_of(ranks, facts)
    if crash is not None:
        return Decision(Verdict.CRASH, crash[0], crash[1], rhythm=beat)
    if ranks and all(gone_at(r) is not None for r in ranks):
        ended_well = (told is not None and told.ended_well) or ended_readably(facts)
        slow = slow_call(ranks)
        if not ended_well:
            return Decision(Verdict.ENDED, rhythm=beat, slow=slow)
        # It ended well; if it was slow all along, that is the verdict (run fails on it only with --fail-on slow).
        return Decision(Verdict.SLOW if slow else Verdict.HEALTHY, slow.stragglers if slow else (), rhythm=beat,
                        slow=slow)
    if not ranks and facts.exit_code not in (None, 0):
        return Decision(Verdict.CRASH, rhythm=beat)

    quiet = now - beat.quiet_since
    spots = wait_spots(ranks)
    spinning = spinning_at_waits(ranks, spots)
    culprits, mismatch = culprits_of(ranks, spots, spinning)
    waiting = any(r.exited_at is None and (r.state == RankState.COLLECTIVE or r.joining) for r in ranks)
    split = bool(mismatch) or (waiting and bool(culprits))
    # The wait already under way when hangdoc arrived: no step since it began (see past.py).
    before = before_attach(ranks, beat.quiet_since, facts.first, facts.fr_pending) if waiting else None
    since = min(beat.quiet_since, before.since) if before is not None else beat.quiet_since
    proven = _proven(ranks, beat)
    proof = proven[0] if proven is not None else None
    if quiet >= beat.threshold_s and waiting:
        return Decision(Verdict.HANG, culprits, since, mismatch, rhythm=beat, before=before,
                        spinning=spinning, proof=proof)
    if (before is not None and confirmed(ranks) and not a_pause(ranks, before)
            and now - before.since >= past_hang_after(beat.source, beat.threshold_s, before.others_asleep)):
        return Decision(Verdict.HANG, culprits, before.since, mismatch, rhythm=beat, before=before, from_past=True,
                        proof=proof)
    if proven is not None:
        # Outside any collective, with no rank or worker moving, the job is frozen as well (no-progress says so).
        frozen = not waiting and all(r.unmoved_since is not None for r in ranks if gone_at(r) is None)
        return Decision(Verdict.HANG, proven[1], since, mismatch, frozen=frozen, rhythm=beat, before=before,
                        proof=proof, spinning=spinning)
    frozen = _all_frozen(ranks, now, beat)
    if frozen is not None:
        return Decision(Verdict.HANG, tuple(r.rank for r in ranks if r.rank is not None), frozen, frozen=True,
                        rhythm=beat)
    if quiet >= beat.threshold_s and _all_held(ranks, now, beat):
        # No progress is the hang, whatever the ranks do: no rank stepped for the threshold and
        # none does anything of its own. What they do names the culprit: a rank spinning at a
        # sync line (NCCL's shape of a wait) stands with the others at one line; the rank apart
        # waits on its data, a lock, a child.
        apart, standing = outliers(ranks) if not waiting else (culprits, ())
        return Decision(Verdict.HANG, apart, beat.quiet_since, mismatch, rhythm=beat, before=before, held=True,
                        spinning=standing)
    stepped = beat.stepped_since if beat.stepped_since is not None else beat.quiet_since
    if beat.moved_by == "data" and now - stepped >= beat.threshold_s:
        # No step for the threshold, but the data moves on: a batch longer than the threshold.
        # Slow, unless at the pace seen the batch would outlast the process group's timeout.
        batch = long_batch(ranks, stepped, now)
        if batch.waited_s + batch.next_batch_s >= facts.pg_timeout_s:
            return Decision(Verdict.HANG, batch.stragglers or culprits, stepped, mismatch, rhythm=beat, before=before,
                            slow=batch)
        return Decision(Verdict.SLOW, batch.stragglers, rhythm=beat, before=before, slow=batch)
    if split and (max(r.points for r in ranks) == 1 or now - since >= _suspect_after(beat)):
        return Decision(Verdict.SUSPECT, culprits, since, mismatch, rhythm=beat, before=before)
    call = slow_call(ranks)
    if call is not None:
        return Decision(Verdict.SLOW, call.stragglers, rhythm=beat, before=before, slow=call)
    return Decision(Verdict.HEALTHY, rhythm=beat, before=before)


def _proven(ranks: Sequence[RankDigest], beat: Rhythm) -> tuple[Proof, tuple[int, ...]] | None:
    """The proof that names the hang now, and the ranks proofs name: a proof counts only where
    no rank stepped since it began (a job that still moves proves nothing, whatever one process shows)."""
    held = [r for r in ranks if r.proof is not None and gone_at(r) is None and r.proof.since >= beat.quiet_since]
    proof = first_proof([r.proof for r in held])
    if proof is None:
        return None
    return proof, named_culprits([(r.rank, r.proof) for r in held])


def _suspect_after(beat: Rhythm) -> float:
    """Quiet long enough to look wrong: a third of the threshold, and longer than any step seen
    (a given --hang-after can sit close to the job's own step time: waiting out one slow step
    while the others wait in all_reduce is the job's rhythm, not a suspicion)."""
    return max(beat.threshold_s / 3, beat.longest_step_s or 0.0)


def node_digest(bundle: Bundle) -> NodeDigest:
    """The node's reading of its ranks, as a merge of thousands of nodes reads it."""
    lines = timelines(bundle)
    return digest_of(bundle, lines, rank_views(bundle, lines))


def digest_of(bundle: Bundle, lines: dict[int, Timeline], views: list[RankView]) -> NodeDigest:
    ranks = []
    # The start's start-up ends when the last of its ranks seen in process-group setup left it.
    setup_end = max((t for v in views if (t := started_up(lines[v.info.pid])) is not None), default=None)
    for view in views:
        line = lines[view.info.pid]
        live = [w.pid for w, _, alive in view.workers if alive]
        since = [t for pid in [view.info.pid, *live] if pid in lines and (t := lines[pid].unmoved_since()) is not None]
        children = [raw_points(bundle, c.pid) for c in bundle.job.children_of(view.info.pid) if c.role is Role.CHILD]
        # The first sample that read the rank's stack: one py-spy could not read says nothing of where
        # it stood, and must not make a wait it sat in from then on look begun after it.
        first = next((p for p in line.points if p.sig), line.points[0])
        fresh = [p for p in line.points if p.fresh]
        quiet = (len(fresh) >= 2 and all(p.sig == fresh[0].sig for p in fresh) and still(line.points)
                 and all(still(lines[pid].points) for pid in live if pid in lines)
                 and all(still(points) for points in children if len(points) >= 2))
        sample = bundle.last.sample_of(view.info.pid)
        ranks.append(RankDigest(
            rank=view.info.rank, pid=view.info.node_pid, host=view.info.host or bundle.host.hostname,
            group_rank=view.info.group_rank, state=view.reading.state, detail=view.reading.detail,
            top_frame=view.reading.frame.label if view.reading.frame else None,
            stack_key=stack_key(signature(sample)), state_since=view.state_since,
            blocked_since=view.blocked_since, exited_at=view.exited_at, progress=view.progress,
            rhythm=rank_progress(line, [lines[pid] for pid in live if pid in lines], setup_end),
            unmoved_since=max(since) if since else None, points=len(line.points),
            joining=setup_name(view.joining) if view.joining else None, world_size=view.info.world_size,
            local_rank=view.info.local_rank, local_world_size=to_int(view.info.env.get("LOCAL_WORLD_SIZE")),
            workers=tuple(DigestWorker(pid=w.node_pid, index=w.worker_index, state=r.state if alive else WorkerState.EXITED,
                                       top_frame=r.frame.label if r.frame else None, alive=alive)
                          for w, r, alive in view.workers),
            started=view.info.start_time, last_ran=_last_ran(first), first_seen=first.time, still=quiet,
            shares=rank_shares(line), held_since=held_since(line, [lines[pid] for pid in live if pid in lines]),
            place=_place_label(view, sample), workers_cpu=workers_cpu(line, [lines[pid] for pid in live if pid in lines]),
            runqueue=runqueue_share(line),
            proof=proof_of(bundle, view.info, view.reading) if view.exited_at is None else None,
            **_exit_fields(bundle, view.info.pid), **store_fields(view.info, sample, view.joining is not None)))
    nodes = max((n for p in bundle.job.ranks if (n := to_int(p.env.get("GROUP_WORLD_SIZE")))), default=None)
    return NodeDigest(DIGEST_VERSION, bundle.samples[0].time, bundle.last.time, tuple(ranks),
                      tuple(fr_step_times(bundle.flight_records)), output_steps(bundle.samples), group_world_size=nodes,
                      fr_pending=fr_pending(bundle.flight_records))


def _place_label(view: RankView, sample: ProcSample | None) -> str | None:
    """Where the rank stands: its top frame, a generator expression or lambda on its caller's line
    folded into the caller (the frame the reading names where it named one of another place)."""
    frames = place(signature(sample))
    if not frames:
        return view.reading.frame.label if view.reading.frame else None
    return frames[0].label


def _last_ran(point) -> float | None:
    """When the rank's main thread had last run before the sample of `point` read it."""
    off = point.main.off_cpu_s if point.main is not None else None
    return None if off is None else round(point.time - off, 3)


def _exit_fields(bundle: Bundle, pid: int) -> dict:
    record = bundle.exit_of(pid)
    if record is None:
        return {}
    return {"exit_time": record.time, "exit_code": record.code, "exit_signal": record.signal}


@per_stack
def stack_key(frames: tuple[Frame, ...]) -> str:
    """The main thread's functions and files (not lines, as STAT's classes), as a stable short hash."""
    text = "\n".join(f"{f.symbol}|{f.short_filename}" for f in frames)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _all_frozen(ranks: Sequence[RankDigest], now: float, beat: Rhythm) -> float | None:
    """No rank stepped and no rank or worker moved (frames, CPU, bytes) for the threshold: frozen
    outside any collective (a deadlock, a lone process asleep). Returns when the freeze began."""
    if not ranks or any(r.state in (RankState.COLLECTIVE, RankState.EXITED, RankState.UNKNOWN) for r in ranks):
        return None
    since = [r.unmoved_since for r in ranks if r.unmoved_since is not None]
    if ranks[0].points < 3 or not since:
        return None
    start = max(max(since), beat.quiet_since)
    return start if now - start >= beat.threshold_s else None


HELD_SHARE = 2 / 3   # of the threshold: how long every rank must have been held (at one line, in a wait)


def _all_held(ranks: Sequence[RankDigest], now: float, beat: Rhythm) -> bool:
    """Every rank held (`progress.held`: in a wait, or standing at one line with its counters
    still, its workers still) for most of the threshold. A rank gone keeps it from the call, as it
    keeps `_all_frozen` from it: a ragged end (one rank done, the other lingering in teardown) is
    judged by the exits, and a crash was told before."""
    if not ranks or any(gone_at(r) is not None or r.held_since is None for r in ranks):
        return False
    return now - max(r.held_since for r in ranks) >= HELD_SHARE * beat.threshold_s
