"""What a watch round reads, and how: the sampling policy of `live/watcher.py`.

Workers' stacks are taken where they matter: all at the first round; every round for the workers
of a rank that waits on its DataLoader (two samples running); every `worker_every` rounds those of
a rank that did not step, and one of each rank that steps, in turn; never a worker whose main
thread has not run since its last stack. The launcher's stack is read on the full rounds only.
Sampling is gentle: a rank that stepped at the last sample (and its workers) is read with
`py-spy --nonblocking`, which does not pause its threads; a rank that looks stuck, and every
process at the first round, is read blocking, for a consistent stack. A rank spinning or dwelling
at one line is probed natively until a wait is found there (SPIN_PROBES times at most), a worker
asleep in a futex beside a rank waiting on its data once per stack. The workers of a rank caught
waiting on its data (within the round that caught it, and at the next), and a worker last seen
asleep on a file lock or reading a pipe, or holding a file lock a process of the job waits for,
get the full /proc read every round:
the kernel's wait, /proc/locks' holder and the pipe's writers are what prove a wait-for cycle, or
a pipe no process can write.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from hangdoc.analyze.classify import signature
from hangdoc.analyze.progress import dwells, place, spins
from hangdoc.analyze.timeline import WAKEUPS_PER_DUMP
from hangdoc.collect.stacks import PySpy
from hangdoc.model import RankState, Role

DWELL_SAMPLES = 3   # a stepping rank caught computing at one line this many samples in a row is probed
DWELL_PROBES = 2    # at most this many times a watch (about 0.2 s of CPU each, a 0.3-0.5 s pause)
SPIN_PROBES = 3     # a place a rank spins at is probed at most this many times while no wait is found there
KERNEL_WAIT_LOOKBACK = 8   # samples looked back through for a worker's last full /proc read


@dataclass(frozen=True)
class Plan:
    """One round's reading: whose stacks, which of them with native frames, which without pausing
    the process, and which processes get only the cheap /proc read."""

    stacks: set[int]
    native: set[int]
    nonblocking: set[int]
    light: set[int]
    steady: set[int] = frozenset()     # ranks that stepped at the last sample (collect/sockets.py)


class Sampling:
    """The policy, over the watcher's state: its job, samples, options, probes, the ranks that
    stepped, the last judgement's timelines and what was probed already."""

    overdue: bool = False   # the last round's decision: a quiet past most of the job's longest step (live/step.py)

    def plan(self, all_workers: bool) -> Plan:
        """This round's reading (`all_workers`: a full round)."""
        waiting_on_data = self._ranks_waiting_on_data()
        wanted = self._stack_pids(all_workers, waiting_on_data)
        # Workers nobody looks at this round get the cheap /proc read (no open files, no kernel wait),
        # but those of a rank caught waiting on its data at the last sample (their stacks wait for a
        # second sighting; a full /proc read costs half a millisecond), and one seen asleep on a file
        # lock or a pipe read, or holding a lock a process waits for: /proc/locks and the pipe's
        # writers, read with the kernel wait, name who could end the wait (a wait-for cycle's proof,
        # a pipe's: analyze/proofs.py).
        caught = self._ranks_waiting_on_data(once=True)
        holders = self._lock_holders()
        light = {p.pid for p in self.job.processes if p.role is Role.WORKER and p.pid not in wanted
                 and p.rank_pid not in caught and p.pid not in holders and not self._in_kernel_wait(p.pid)}
        blocked = self._blocked_workers(waiting_on_data)
        wanted |= blocked
        probe = (self._spinning() | blocked) & wanted   # read paused, with native frames, this once
        return Plan(stacks=wanted, native=probe, nonblocking=self._gentle_pids() - probe, light=light,
                    steady=set(self.stepping))

    def late_workers(self, snapshot, plan: Plan) -> tuple[set[int], set[int]]:
        """The workers of a rank this very round caught waiting on its data, that the round did not
        read closely, read again at once: what may prove the hang in them (a forked worker asleep on
        a lock, a pipe no process writes, a file lock another holds) is then seen a round sooner.
        Caught once, their full /proc read (the kernel's wait, half a millisecond each); caught at
        the round before too, or in a quiet past most of the job's longest step (`overdue`), their
        stacks as well, where the next round would take them (`_ranks_waiting_on_data`): a rank that
        waits on its data round after round has its workers planned, and is read once. (Those to
        read, those of them whose stacks to take: not a worker whose main thread has not run since
        its last stack.) A worker this round read lightly that holds a file lock a process of the
        job was found asleep on is read in full too: is it asleep on one the waiter holds?"""
        before = self.samples[-1] if self.samples else None
        holders = self._lock_holders(snapshot) & plan.light
        once = self._waiting_on_data(snapshot, before, once=True)
        if not once:
            return holders, set()
        again = self._waiting_on_data(snapshot, before)
        alive = {s.pid for s in snapshot.processes if s.alive}
        workers = [p for p in self.job.processes if p.role is Role.WORKER and p.rank_pid in once
                   and p.pid in alive and p.pid not in plan.stacks]
        stacks = {p.pid for p in workers if p.rank_pid in again and not self._parked(p.pid)}
        late = stacks | holders | {p.pid for p in workers if p.pid in plan.light}
        return late, stacks

    @staticmethod
    def may_prove(snapshot, pids: set[int]) -> set[int]:
        """Those of `pids`, read closely in `snapshot`, asleep where a proof begins: a futex (a lock),
        a file lock, an empty pipe, or stopped. Their stacks are read within the round (what the lock
        is, what the pipe is read through), and the round after comes at a proof's PROOF_SPAN_S, so
        the proof agrees there, not a round later (live/watcher.py)."""
        return {sample.pid for sample in snapshot.processes
                if sample.pid in pids and sample.alive and (proc := sample.proc) is not None and proc.full
                and (proc.state == "T" or proc.in_futex or proc.in_file_lock or proc.in_pipe_read)}

    def _spinning(self) -> set[int]:
        """Ranks to probe natively this round, once per stack they stand at: a rank whose main
        thread burned CPU at one line between its last two samples with its loop counters still.
        On NCCL that is a host spinning at the job's next sync (`.item()`) while a collective sits
        on the GPU stream, and no Python frame says so; the native frames do (analyze/classify.py)."""
        if self.options.nonblocking or self.judgement is None or self.judgement.lines is None \
                or not isinstance(self.probes.pyspy, PySpy):
            return set()
        chosen = set()
        for rank in self.job.by_role(Role.RANK):
            line = self.judgement.lines.get(rank.pid)
            fresh = [p for p in line.points[-6:] if p.fresh] if line is not None else []
            if len(fresh) < 2:
                continue
            key = (rank.pid, place(fresh[-1].sig))
            # A place probed without a wait found is probed again, SPIN_PROBES times at most: a read
            # that caught the Python side of a spin loop (between two `is_completed()` calls) says
            # nothing of what the loop waits on. A rank that steps but spends most of each step at
            # one line (three samples in a row) is probed too, at most DWELL_PROBES times a watch:
            # a straggler's peers wait there.
            known = self.live.waits_at(rank.pid, fresh[-1].sig)
            frozen = not known and self.spin_probes.get(key, 0) < SPIN_PROBES and spins(fresh[-2], fresh[-1])
            dwelling = (len(fresh) >= DWELL_SAMPLES and self.dwell_probes.get(rank.pid, 0) < DWELL_PROBES
                        and not known and dwells(fresh[-DWELL_SAMPLES:]))
            if not (frozen or dwelling):
                continue
            if frozen:
                self.spin_probes[key] = self.spin_probes.get(key, 0) + 1
            else:
                self.dwell_probes[rank.pid] = self.dwell_probes.get(rank.pid, 0) + 1
            chosen.add(rank.pid)
        return chosen

    def _blocked_workers(self, waiting_on_data: set[int]) -> set[int]:
        """Workers to probe natively this round, once per stack (`_unprobed_blocked`)."""
        chosen = set()
        for key in self._unprobed_blocked(waiting_on_data):
            self.probed.add(key)
            chosen.add(key[0])
        return chosen

    def probes_due(self) -> bool:
        """Whether the next round would probe a blocked worker it has not probed at this stack: a
        hang named now would end the watch without the native frames that name the library."""
        return bool(self._unprobed_blocked(self._ranks_waiting_on_data()))

    def _unprobed_blocked(self, waiting_on_data: set[int]) -> set[tuple]:
        """(worker pid, stack) of each worker of a rank that waits on its data, asleep in a futex at
        its last two full readings with no CPU used between them, not yet probed at that stack. A
        lock in native code (a thread pool its parent used before forking it) shows no Python frame
        of its own; the native frames name the library (rules/native_libs.py). The cheap /proc reads
        between (no kernel wait in them) are passed over: a worker read cheaply at one round is not
        kept from its probe for two more."""
        if self.options.nonblocking or len(self.samples) < 2 or not isinstance(self.probes.pyspy, PySpy):
            return set()
        due = set()
        for proc in self.job.processes:
            if proc.role is not Role.WORKER or proc.rank_pid not in waiting_on_data:
                continue
            full = self._full_readings(proc.pid, 2)
            if len(full) < 2 or not all(p.in_futex for p in full) or full[0].cpu_s != full[1].cpu_s:
                continue
            key = (proc.pid, self._stack_key(proc.pid))
            if key[1] is not None and key not in self.probed:
                due.add(key)
        return due

    def _full_readings(self, pid: int, count: int) -> list:
        """The newest `count` full /proc readings of `pid` (oldest first), from the samples since the
        newest one that read it at all: a process gone from a sample breaks the run."""
        found = []
        for snapshot in reversed(self.samples):
            sample = snapshot.sample_of(pid)
            if sample is None or sample.proc is None:
                break
            if sample.proc.full:
                found.append(sample.proc)
                if len(found) == count:
                    break
        return found[::-1]

    def _stack_key(self, pid: int) -> tuple | None:
        """The Python frames of the newest stack read of `pid`; None: none read yet."""
        for snapshot in reversed(self.samples):
            sample = snapshot.sample_of(pid)
            if sample is not None and sample.stack is not None:
                return signature(sample)
        return None

    def _gentle_pids(self) -> set[int]:
        """Processes read without pausing them: all with --nonblocking, else the stepping ranks'."""
        if self.options.nonblocking:
            return {p.pid for p in self.job.processes}
        return {p.pid for p in self.job.processes
                if p.pid in self.stepping or (p.role is not Role.RANK and p.rank_pid in self.stepping)}

    def _stack_pids(self, all_workers: bool, waiting_on_data: set[int]) -> set[int]:
        """Whose stacks this round: every rank; new workers, and the workers of a rank waiting on
        its data, every round; on the full rounds the launcher, every worker of a rank that did not
        step, and one worker of each rank that steps (in turn: its workers do the same work, and
        the rank's own progress says they keep up). Never a worker whose main thread has not run
        since its last stack (its stack is where it was)."""
        assert self.job is not None
        alive = self._alive_pids()
        wanted = {p.pid for p in self.job.processes
                  if p.role is Role.RANK or (all_workers and p.role is Role.LAUNCHER)}
        sampled = self._sampled_workers(alive) if all_workers else set()
        for proc in self.job.processes:
            if proc.role is not Role.WORKER:
                continue
            if proc.worker_index is None or ((proc.pid in sampled or proc.rank_pid in waiting_on_data)
                                             and not self._parked(proc.pid)):
                wanted.add(proc.pid)
        return wanted & alive

    def _sampled_workers(self, alive: set[int]) -> set[int]:
        """A full round's workers: all of a rank that did not step at the last sample; of a rank
        that did, the one whose turn it is (round-robin over full rounds, by worker index)."""
        by_rank: dict[int | None, list] = {}
        for proc in self.job.processes:
            if proc.role is Role.WORKER and proc.pid in alive:
                by_rank.setdefault(proc.rank_pid, []).append(proc)
        turn = self.rounds // max(1, self.options.worker_every)
        chosen = set()
        for rank_pid, workers in by_rank.items():
            if rank_pid not in self.stepping:
                chosen.update(w.pid for w in workers)
                continue
            workers.sort(key=lambda w: (w.worker_index is None, w.worker_index or 0, w.pid))
            chosen.add(workers[turn % len(workers)].pid)
        return chosen

    def _lock_holders(self, snapshot=None) -> set[int]:
        """The pids /proc/locks named, at `snapshot` (None: the last sample), as holding a lock a
        process of the job waits for."""
        if snapshot is None and not self.samples:
            return set()
        return {lock.holder_pid for s in (snapshot or self.samples[-1]).processes if s.proc is not None
                for lock in s.proc.locks if lock.holder_pid}

    def _in_kernel_wait(self, pid: int) -> bool:
        """Its last full /proc read, among the last few samples, showed it asleep on a file lock or
        reading a pipe."""
        for snapshot in islice(reversed(self.samples), KERNEL_WAIT_LOOKBACK):
            sample = snapshot.sample_of(pid)
            if sample is not None and sample.proc is not None and sample.proc.full:
                return sample.proc.in_file_lock or sample.proc.in_pipe_read
        return False

    def _parked(self, pid: int) -> bool:
        """The process's main thread has not run since its stack was last read: no CPU, no
        involuntary switch, no wake-up but the ones a blocking py-spy dump itself causes. Its
        last stack is then where it still is (a worker blocked on a lock since that read)."""
        before = self.stacked_at.get(pid)
        if before is None:
            return False
        now = self.probes.procfs.thread_counters(pid)
        return (now is not None and now.cpu_s == before.cpu_s
                and now.involuntary_switches == before.involuntary_switches
                and 0 <= now.voluntary_switches - before.voluntary_switches <= WAKEUPS_PER_DUMP)

    def _alive_pids(self) -> set[int]:
        if not self.samples:
            return {p.pid for p in self.job.processes}
        last = self.samples[-1]
        known = {s.pid for s in last.processes}
        return {p.pid for p in self.job.processes
                if p.pid not in known or (last.sample_of(p.pid) and last.sample_of(p.pid).alive)}

    def _ranks_waiting_on_data(self, once: bool = False) -> set[int]:
        """Ranks caught waiting on their DataLoader in the last two samples running (`once`: at the
        last sample). One sample is not enough for the workers' stacks: a healthy rank is caught
        between batches now and then (on a busy 8 x 8 node a rank in ten, every round), and they
        would be read for nothing; but it is in a quiet past most of the job's longest step
        (`overdue`, the watch's last decision), when the workers may hold what proves a hang and a
        round sooner counts."""
        if len(self.samples) < (1 if once else 2):
            return set()
        return self._waiting_on_data(self.samples[-1], self.samples[-2] if len(self.samples) >= 2 else None, once)

    def _waiting_on_data(self, last, before, once: bool = False) -> set[int]:
        """The ranks `last` caught waiting on their DataLoader, and `before` too (a snapshot each;
        `before` None: none), unless `once` or in an overdue quiet."""
        from hangdoc.analyze.classify import classify_rank

        def waits(sample) -> bool:
            return sample is not None and classify_rank(sample).state == RankState.DATALOADER

        return {r.pid for r in self.job.by_role(Role.RANK) if waits(last.sample_of(r.pid))
                and (once or self.overdue or (before is not None and waits(before.sample_of(r.pid))))}
