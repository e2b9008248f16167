"""The watch loop: sample the job every interval until it hangs, crashes, ends or time runs out.

Each round re-discovers the job (new DataLoader workers appear every epoch; left out while no
process has started on the node), captures it as the sampling policy plans (`live/sampling.py`:
whose stacks, read how), and updates the (pure) analysis with the new sample.

Between rounds the loop waits on the exit watcher (collect/exits.py), not a plain sleep: every
process's exit status is read the moment it dies, and a rank's or the launcher's exit brings
the next round at once.
"""
from __future__ import annotations

import dataclasses
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from hangdoc.analyze.logs import output_step
from hangdoc.analyze.proving import PROOF_SPAN_S
from hangdoc.analyze.timeline import LiveTimelines
from hangdoc.base.errors import HangdocError
from hangdoc.collect.datalists import copy_data_lists
from hangdoc.collect.discover import find_job
from hangdoc.collect.exits import ExitWatcher
from hangdoc.collect.host import host_facts
from hangdoc.collect.logs import log_sources, read_tails
from hangdoc.collect.procfs import ProcDenied, ProcGone
from hangdoc.collect.snapshot import Probes, capture
from hangdoc.collect.spawned import StackRanks
from hangdoc.live.capture import make_bundle
from hangdoc.live.options import WatchOptions
from hangdoc.live.sampling import Sampling
from hangdoc.live.probes import engine_name, require_stacks
from hangdoc.live.step import (
    Decision, Fact, Policy, Seen, State, asked, ending_dict, watch_ending, watch_step,
)
from hangdoc.bundle.recording import Recorder
from hangdoc.model import Bundle, Ending, Host, Job, NodeDigest, Progress, Report, Role, Snapshot, StopReason
from hangdoc.report.judge import End, Judgement, judge

MAX_SAMPLES = 600   # about 20 minutes at the default interval; older samples are dropped
JITTER = 0.15       # each wait between rounds is the interval +-15 %
# A round taken soon, in a quiet past most of the job's longest step (live/step.py: overdue): two of them
# span more than a proof's span (analyze/proofs.py: PROOF_SPAN_S, 1.5 s), so a proof agrees at once.
HURRY_S = 0.8
SPAN_MARGIN_S = 0.05   # past a proof's span, for the clock's jitter between two rounds
REDISCOVER_EVERY = 5   # at least every this many rounds the job is discovered again, new pids or not


@dataclass(frozen=True)
class Outcome:
    """How a watch ended: the judgement (its report, the diagnosis whose digest the save writes
    beside the samples, so the save does not analyse again, and the exit code), the bundle to
    save, and why it stopped."""

    judgement: Judgement
    bundle: Bundle
    reason: StopReason

    @property
    def report(self) -> Report:
        return self.judgement.report

    @property
    def digest(self) -> NodeDigest | None:
        return self.judgement.digest

    @property
    def exit_code(self) -> int:
        return self.judgement.exit_code


@dataclass
class Watcher(Sampling):
    pid: int
    probes: Probes
    options: WatchOptions
    sleep: Callable[[float], None] = time.sleep
    exit_code: Callable[[], int | None] = lambda: None   # the launcher's, when we started it
    extra_logs: Callable[[], tuple] = tuple              # output hangdoc itself captured
    job: Job | None = None
    samples: deque = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    sources: tuple[str, ...] = ()
    data_lists: tuple = ()
    rounds: int = 0
    stepping: set = field(default_factory=set)   # ranks that stepped at the last sample
    flight: object = None                                # a FlightCollector, made on first use
    state: State = field(default_factory=State)   # what the rounds judged so far (live/step.py)
    recorder: Recorder | None = None                  # --record DIR: every round written as it comes
    decision: Decision | None = None                  # what the last round decided
    stacked_at: dict = field(default_factory=dict)   # pid -> its main thread's counters when its stack was read
    exit_watcher: ExitWatcher | None = None          # made at start() over the probes' /proc
    probed: set = field(default_factory=set)         # (worker pid, stack) a native probe has read once
    spin_probes: dict = field(default_factory=dict)  # (rank pid, place) -> native probes of a spin there
    dwell_probes: dict = field(default_factory=dict)  # pid -> probes of a rank that steps (bounded)
    jitter: random.Random = field(default_factory=random.Random)
    stack_ranks: StackRanks | None = None            # reads ranks no environment names, once a process
    host: tuple | None = None                        # (first rank's pid, its Host facts)
    discovered: set = field(default_factory=set)     # the node's pids when the job was last discovered
    undiscovered: int = 0                            # rounds since, none of them discovering
    read_late: bool = False                          # this round read a waiting rank's workers' stacks (late_workers,
                                                     # may_prove: one asleep where a proof begins)

    def start(self) -> Bundle:
        """Find the job and take the first full capture; attach errors surface here."""
        self.discovered = set(self.probes.procfs.pids())
        self.job = find_job(self.pid, self.probes.procfs, single=self.options.single)
        if self.exit_watcher is None:
            self.exit_watcher = ExitWatcher(proc_root=str(self.probes.procfs.root), sleep=self.sleep)
        self.data_lists = copy_data_lists(self.job, self.probes.procfs.root)
        snapshot = self._capture(all_workers=True)
        require_stacks(snapshot, self.job)
        return self.bundle()

    def step(self) -> Bundle:
        self._rediscover()
        self._capture(all_workers=self.rounds % self.options.worker_every == 0)
        return self.bundle()

    def bundle(self) -> Bundle:
        # The exits before the output: a rank writes its last lines (the traceback that says why)
        # before it exits, so every exit this bundle holds has its lines in the logs read after it.
        exits = self.exit_watcher.exits if self.exit_watcher is not None else ()
        exit_code = self.exit_code()
        logs = self.extra_logs() + (read_tails(self.sources) if self.sources else ())
        if self.samples and self.samples[-1].output_step is None:
            # What the job's output said at this round: a witness of progress (analyze/logs.py).
            self.samples[-1] = dataclasses.replace(self.samples[-1], output_step=output_step(logs))
        return dataclasses.replace(
            make_bundle(self.job, tuple(self.samples), self.probes.procfs,
                        self.options.record(engine_name(self.probes.pyspy)),
                        logs=logs, host=self._host()),
            exit_code=exit_code,
            data_lists=self.data_lists,
            exits=exits,
        )

    def run(self, on_sample: Callable[[Report], None] | None = None,
            ended: Callable[[], bool] = lambda: False, on_round: Callable[[], object] = lambda: None) -> Outcome:
        """Sample until a verdict; the caller renders and saves. `start()` may have run already.

        Each round reads the job through the probes (the I/O), then `live/step.py` judges it and
        decides (pure); a recorder, when there is one, writes what the round saw."""
        bundle = self.bundle() if self.samples else self.start()
        began = time.monotonic()
        policy = self.policy
        self.record("start", policy=dataclasses.asdict(policy))
        try:
            while True:
                bundle, judgement = self.judge_round(bundle, time.monotonic() - began, bool(ended()))
                decision = self.decision
                if on_sample:
                    on_sample(judgement.report)
                reason = decision.stop
                if reason is StopReason.CRASH:
                    bundle = self.bundle()    # the output as it is now: the lines the ranks left as they fell
                if reason is not None:
                    # The timeline lanes are drawn once, for the report the watch ends with.
                    return Outcome(self.judge(bundle, watch_ending(reason, policy)), bundle, reason)
                delay = 0.0 if decision.at_once else self._next_delay(bundle)
                self.overdue = decision.soon    # a quiet past most of the longest step: read sooner, and closer
                if self.read_late:
                    # Workers read closely this round: a proof begun there agrees at the span's end,
                    # one round later (two hurried rounds would span it too, at twice the reading).
                    delay = min(delay, PROOF_SPAN_S + SPAN_MARGIN_S)
                elif decision.soon:
                    delay = min(delay, HURRY_S)
                if self.options.timeout_s is not None:    # never wait past the timeout
                    delay = min(delay, max(0.0, began + self.options.timeout_s - time.monotonic()))
                self._wait(delay)
                on_round()
                bundle = self.step()
        finally:
            if self.exit_watcher is not None:
                self.exit_watcher.close()

    def judge_round(self, bundle: Bundle, at_s: float = 0.0, ended: bool = False) -> tuple[Bundle, Judgement]:
        """One round: the job's own records read into the bundle when the last round looked stuck (the
        I/O), then the step (pure) judges it and decides; the recorder writes what the round saw."""
        bundle = self._with_flight_records(bundle, self.state.stuck)
        seen = Seen(bundle, at_s, ended=ended, probes_due=Fact(self.probes_due),
                    own_records=Fact(lambda: self._has_own_records(bundle.job)))
        self.state, judgement, self.decision = watch_step(self.state, seen, self.policy)
        self.stepping = {r.pid for r in judgement.report.ranks if r.progress == Progress.ACTIVE}
        self.record("round", bundle, at_s=round(at_s, 6), ended=ended, probes_due=asked(seen.probes_due),
                    own_records=asked(seen.own_records))
        return bundle, judgement

    @property
    def probe_due(self) -> bool:
        """The last round held its hang for a blocked worker's native probe."""
        return self.decision is not None and self.decision.probe_due

    @property
    def policy(self) -> Policy:
        return Policy(self.options.hang_after_s, self.options.timeout_s, self.options.stop_when_slow)

    @property
    def judgement(self) -> Judgement | None:
        """The last round's judgement (its report gets its lanes at the end)."""
        return self.state.judgement

    @property
    def live(self) -> LiveTimelines:
        """The analysis's timelines, round to round."""
        return self.state.live

    def judge(self, bundle: Bundle, ending: End) -> Judgement:
        """The final judgement of what was watched, taking over the last round's analysis."""
        judgement = judge(bundle, ending, self.state.judgement, hang_after=self.options.hang_after_s, live=self.live)
        self.state = dataclasses.replace(self.state, judgement=judgement)
        self.record("final", bundle, ending=ending_dict(ending))
        return judgement

    def record(self, kind: str, bundle: Bundle | None = None, **meta) -> None:
        """What this round saw, to the recording (`--record DIR`), when there is one."""
        if self.recorder is not None:
            self.recorder.write(kind, meta, bundle, taken=self.rounds)

    def stopped(self, code: int, ending: End | None = None) -> Outcome | None:
        """Stopped by Ctrl-C or SIGTERM (`code`: 130 / 143): the judgement of what was seen so far,
        or None before the first sample."""
        if not self.samples:
            return None
        bundle = self.bundle()
        ending = dataclasses.replace(ending or End(), kind=Ending.INTERRUPTED, signal_exit=code)
        return Outcome(self.judge(bundle, ending), bundle, StopReason.INTERRUPTED)

    # -- internals -------------------------------------------------------------------
    def _host(self) -> Host:
        """The machine's and the job's Python and torch: read from the first rank's memory map
        once, again only when that rank changes (a restart) or a version was not found yet."""
        first = next(iter(self.job.by_role(Role.RANK)), None)
        key = first.pid if first is not None else None
        if self.host is None or self.host[0] != key or self.host[1].python_version is None \
                or self.host[1].torch_version is None:
            self.host = (key, host_facts(self.job, self.probes.procfs))
        return self.host[1]

    def _wait(self, delay: float) -> None:
        """Until the next round: `delay` seconds, or less when a rank or the launcher exits."""
        if self.exit_watcher is None:
            self.sleep(delay)
        else:
            self.exit_watcher.wait(delay)

    def _with_flight_records(self, bundle: Bundle, stuck: bool) -> Bundle:
        """The job's own record: every rank's FR settings; once a rank looked stuck (the last
        round), its FR dumps (dump pipes written to once, a bounded wait) and NCCL RAS."""
        from hangdoc.collect.flight_recorder import fr_configs
        from hangdoc.live.flight import FlightCollector

        self.flight = self.flight or FlightCollector()
        self.flight.gather(bundle.job, stuck)
        return dataclasses.replace(bundle, flight_config=fr_configs(bundle.job), flight_records=self.flight.records,
                                   flight_errors=self.flight.errors, ras=self.flight.ras)

    @staticmethod
    def _has_own_records(job: Job) -> bool:
        """Whether the job keeps records of its own to ask for once it looks stuck (FR, NCCL RAS)."""
        from hangdoc.collect.flight_recorder import config_files, fr_configs
        from hangdoc.collect.ras import uses_nccl

        configs = fr_configs(job)
        return uses_nccl(job) or any(c.pipe_exists or config_files(c) for c in configs)

    def _capture(self, all_workers: bool) -> Snapshot:
        assert self.job is not None
        plan = self.plan(all_workers)
        snapshot, self.job = capture(self.job, self.probes, stack_pids=plan.stacks,
                                     native=self.options.native or plan.native, nonblocking=plan.nonblocking,
                                     light=plan.light, steady=plan.steady)
        late, stacks = self.late_workers(snapshot, plan)
        asleep: set[int] = set()
        if late:
            snapshot = self._read_late(snapshot, late, stacks, plan)
            asleep = self.may_prove(snapshot, late - stacks)
            if (unparked := {pid for pid in asleep if not self._parked(pid)}):
                snapshot = self._read_late(snapshot, unparked, unparked, plan)
        self.read_late = bool(stacks or asleep)
        self.samples.append(snapshot)
        if self.exit_watcher is not None:
            for proc in self.job.processes:
                self.exit_watcher.watch(proc.pid, wake=proc.role in (Role.RANK, Role.LAUNCHER))
            self.exit_watcher.observe(snapshot)
        for sample in snapshot.processes:
            if sample.stack is not None and sample.proc is not None:
                self.stacked_at[sample.pid] = sample.proc.main_thread
        self.rounds += 1
        if not self.sources or self.rounds % 10 == 1:
            self.sources = tuple(dict.fromkeys(self.sources + log_sources(self.job, self.probes.procfs.root)))
        return snapshot

    def _read_late(self, snapshot: Snapshot, late: set[int], stacks: set[int], plan) -> Snapshot:
        """`snapshot` with the processes in `late` read again, closely (open files, the kernel's
        wait, the stacks in `stacks`), a moment after the round's first reading (`late_workers`)."""
        job = dataclasses.replace(self.job, processes=tuple(p for p in self.job.processes if p.pid in late))
        again, _ = capture(job, self.probes, stack_pids=stacks, nonblocking=plan.nonblocking, within=True)
        closer = {s.pid: s for s in again.processes}
        return dataclasses.replace(snapshot, processes=tuple(closer.get(s.pid, s) for s in snapshot.processes),
                                   took_s=round(snapshot.took_s + again.took_s, 4))

    def _rediscover(self) -> None:
        """Merge what runs now into the job: new workers join, the dead stay on record.

        A discovery reads every process on the node (its parent, an environment or two): it is
        left out while no process started since the last one descends from the job's (a new
        process's parent is read, nothing more), up to REDISCOVER_EVERY rounds in a row (a process
        that execs into a rank starts no new one)."""
        assert self.job is not None
        try:
            running = set(self.probes.procfs.pids())
        except OSError:
            running = None
        if running is not None and self.undiscovered < REDISCOVER_EVERY - 1:
            fresh = running - self.discovered
            if not self._joins_job(fresh):
                # Processes started elsewhere on the node (another job's, a shell's) are not read again.
                self.discovered |= fresh
                self.undiscovered += 1
                return
        self.discovered, self.undiscovered = running or set(), 0
        lone = self.job.single_process      # it may yet start ranks: mp.spawn's script, slow to import torch
        for anchor in self._anchors():
            try:
                known = {} if lone else {p.pid: p for p in self.job.processes}
                self.stack_ranks = self.stack_ranks or StackRanks()
                fresh = find_job(anchor, self.probes.procfs, single=self.options.single, known=known,
                                 stack_ranks=self.stack_ranks)
            except HangdocError:
                continue
            if lone and not fresh.single_process:
                self.job = fresh            # it did: the job is its ranks', the lone process their launcher
                return
            merged = list(self.job.processes)
            for proc in fresh.processes:
                if proc.pid not in known:
                    merged.append(proc)
            self.job = dataclasses.replace(self.job, processes=tuple(merged))
            return

    def _joins_job(self, fresh: set[int]) -> bool:
        """Some of the `fresh` processes descends from the job's (its parent is one of the job's,
        or a fresh one that does): one /proc/PID/stat read a new process, not a discovery."""
        if not fresh:
            return False
        parents = {}
        for pid in fresh:
            try:
                parents[pid] = self.probes.procfs.stat(pid).ppid
            except (ProcGone, ProcDenied, ValueError, IndexError):
                continue            # gone already: nothing to discover
        ours = {p.pid for p in self.job.processes}
        grown = True
        while grown:
            grown = False
            for pid, ppid in parents.items():
                if pid not in ours and ppid in ours:
                    ours.add(pid)
                    grown = True
        return bool(ours & fresh)

    def _anchors(self) -> list[int]:
        alive = self._alive_pids()
        order = [self.job.launcher_pid] + [p.pid for p in self.job.ranks]
        return [pid for pid in order if pid is not None and pid in alive]

    def _next_delay(self, bundle: Bundle) -> float:
        # A rank just exited: look again soon, so a crash is told from a clean end quickly.
        last = bundle.last
        if any(not s.alive for s in last.processes if bundle.job.info(s.pid)
               and bundle.job.info(s.pid).role is Role.RANK):
            return min(0.5, self.options.interval_s)
        # Jittered, so that samples land at random phases of a step whose time divides the
        # interval: the time shares (analyze/shares.py) are then estimates, not an alias.
        return self.options.interval_s * self.jitter.uniform(1 - JITTER, 1 + JITTER)

