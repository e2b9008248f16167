"""What proves a rank can never step again: a positive fact of /proc or the stacks, not an absence
of progress. Pure.

The threshold (`progress.rhythm`) names a hang from quiet alone, so it waits out the job's slowest
step. Some hangs show themselves: a process stopped (state T), a forked DataLoader worker asleep
on a lock that no thread of its own can release, processes of the job each asleep on a file lock
the next one holds (a wait-for cycle, /proc/locks), a read on a pipe no process can write, a pdb
prompt reading stdin, a wait on a queue or event whose feeding thread is gone, a collective whose
peer left (the pipe's and the peer's are in `analyze/cutoff.py`: waits cut off from what would end
them). Each is a `Proof` once two samples at least PROOF_SPAN_S apart agree on it with the
process's CPU flat between them (`analyze/proving.py`: a process stopped for an instant, a lock
taken and released, a prompt answered at once never agree for that long); `decide` names the hang
then, if no rank stepped since the proof began.
"""
from __future__ import annotations

from collections.abc import Sequence

from hangdoc.analyze.classify import Reading, classify_rank, own_frame, signature
from hangdoc.analyze.cutoff import peer_gone, pipe_no_writer
from hangdoc.analyze.proving import (
    PROOF_SPAN_S, RUN_LIMIT, Fact, agreeing, alive, at_line, cpu_used, named, proven, still_since, who,
)
from hangdoc.model import (
    Bundle, FileLock, ProcessInfo, ProcSample, Proof, ProofKind, RankState, Role, Thread, Wait,
)

__all__ = ["PROOF_SPAN_S", "agreeing", "first_proof", "proof_of"]

CYCLE_LIMIT = 16       # processes followed from waiter to holder before a chain is given up


def proof_of(bundle: Bundle, rank: ProcessInfo, reading: Reading) -> Proof | None:
    """The most telling proof that `rank` (or a worker it waits on) can never step again; None
    where there is none. `reading`: the rank's at the last sample."""
    workers = [w for w in bundle.job.children_of(rank.pid) if w.role is Role.WORKER and alive(bundle, w.pid)]
    finders = [_stopped]
    if reading.state == RankState.DATALOADER:
        finders.append(_fork_lock)
    if reading.state == RankState.DATALOADER or reading.detail == Wait.FILE_LOCK:
        finders.append(_lock_cycle)
    if reading.detail == Wait.DEBUGGER:
        finders.append(_pdb_prompt)         # its stdin is often a pipe no process writes: the prompt says more
    if reading.detail == Wait.THREAD:
        finders.append(_dead_producer)
    finders.append(pipe_no_writer)
    if reading.state == RankState.COLLECTIVE:
        finders.append(peer_gone)
    for find in finders:
        proof = find(bundle, rank, workers, reading)
        if proof is not None:
            return proof
    return None


def _stopped(bundle: Bundle, rank: ProcessInfo, workers: list[ProcessInfo], reading: Reading) -> Proof | None:
    """The rank, or a worker of a rank waiting on its data, in state T (SIGSTOP, Ctrl-Z, a debugger's
    stop; not "t", the tracing stop a stack read makes): it runs no code until something continues it."""
    subjects = [(rank, None)] + [(rank, w) for w in workers if reading.state == RankState.DATALOADER]
    for owner, worker in subjects:
        run = agreeing(bundle, (worker or owner).pid,
                       lambda s: s.proc.state == "T" if s.proc is not None else None)
        if proven(run):
            frame = own_frame(signature(run[-1][1]))
            at = f" at {frame.label}" if frame is not None else ""
            tail = f", and rank {rank.rank} waits for its data" if worker is not None else ""
            return Proof(ProofKind.STOPPED.value, run[0][0], run[-1][0],
                         f"{named(owner, worker)} is stopped (state T: SIGSTOP, Ctrl-Z or a debugger){at} at every "
                         f"sample for {run[-1][0] - run[0][0]:.1f} s: it runs no code until it is continued{tail}",
                         (worker or owner).node_pid)
    return None


def _fork_lock(bundle: Bundle, rank: ProcessInfo, workers: list[ProcessInfo], reading: Reading) -> Proof | None:
    """A forked worker of a rank waiting on its data, asleep in a futex at a line of the job's own
    code (a lock's acquire), none of its threads running the job's code and none of its rank's
    workers using CPU: the lock's holder is no thread of this process. It was held by a thread of
    the rank when the worker was forked, and the copy stays held for ever."""
    if reading.state != RankState.DATALOADER:
        return None
    for worker in workers:
        if worker.start_method != "fork":
            continue
        run = agreeing(bundle, worker.pid, _on_own_lock)
        # A stack must show the lock; full readings asleep in the futex before it count, the CPU flat
        # since (`agreeing`): the worker ran no code between them, so it was in that wait already.
        if not any(s.stack is not None for _, s in run):
            continue
        if not proven(run) or not _siblings_still(bundle, workers, run[0][0]):
            continue
        frame = own_frame(signature(next(s for _, s in reversed(run) if s.stack is not None)))
        return Proof(ProofKind.FORK_LOCK.value, run[0][0], run[-1][0],
                     f"{named(rank, worker)}, forked, waits on a lock at {frame.label if frame else '?'} (asleep in a "
                     f"futex, {cpu_used(run):.2f} s CPU over {run[-1][0] - run[0][0]:.1f} s) that no thread of its "
                     f"own holds: none of its threads runs the job's code, so the lock is held by a thread that "
                     f"does not exist in this process" + _holders(bundle, rank), worker.node_pid)
    return None


def _on_own_lock(sample: ProcSample) -> bool | None:
    proc, stack = sample.proc, sample.stack
    if proc is None or not proc.full:
        return None
    if stack is None:
        # A worker whose main thread has not run since its last stack is not read again (the watch's
        # sampling): still in the futex, its CPU flat (`agreeing`), it stands where that stack showed.
        return proc.in_futex
    frames = signature(sample)
    if not proc.in_futex or not frames or not frames[0].is_job_code:
        return False
    # A thread of the job's own code in the worker could hold the lock, and release it.
    return not any(own_frame(t.frames) is not None for t in stack.threads if not t.is_main)


def _siblings_still(bundle: Bundle, workers: list[ProcessInfo], since: float) -> bool:
    """No worker of the rank used CPU since `since`: none holds a lock they share (a
    multiprocessing.Lock) while it works."""
    return all(still_since(bundle, worker.pid, since) for worker in workers)


def _holders(bundle: Bundle, rank: ProcessInfo) -> str:
    """The rank's threads of the job's own code: one of them held the lock when the worker was forked."""
    sample = bundle.last.sample_of(rank.pid)
    threads = [t for t in sample.stack.threads if not t.is_main and own_frame(t.frames) is not None] \
        if sample is not None and sample.stack is not None else []
    if not threads:
        return ""
    named = ", ".join(f"{t.name!r} ({t.tid:#x})" for t in threads[:3])
    return f" (rank {rank.rank}'s own thread{'s' if len(threads) > 1 else ''}: {named})"


def _lock_cycle(bundle: Bundle, rank: ProcessInfo, workers: list[ProcessInfo], reading: Reading) -> Proof | None:
    """The rank, or a worker of a rank waiting on its data, asleep on a file lock whose holder is
    asleep on a file lock ... whose holder is the first: /proc/locks names each holder, the kernel
    (wchan) each sleep, the same at every sample, their CPU flat. None of them can take its lock
    until another lets go, and none runs to let go (flock and OFD locks have no deadlock check)."""
    for subject in [rank] + (workers if reading.state == RankState.DATALOADER else []):
        cycle = _cycle_from(bundle, subject)
        if cycle is None:
            continue
        runs = [agreeing(bundle, proc.pid, _waits_for(lock)) for proc, lock in cycle]
        if not all(runs):
            continue
        since = max(run[0][0] for run in runs)
        runs = [[(t, s) for t, s in run if t >= since] for run in runs]
        if not all(proven(run) for run in runs):
            continue
        at = min(run[-1][0] for run in runs)
        said = f"{who(bundle, subject)}{at_line(runs[0])}"
        for n, (_, lock) in enumerate(cycle):
            holder = cycle[(n + 1) % len(cycle)][0]
            held_by = who(bundle, holder, short=True) if holder is subject else who(bundle, holder) + at_line(runs[n + 1])
            said += f"{', which' if n else ''} waits for {lock.path or 'inode ' + lock.inode} held by {held_by}"
        return Proof(ProofKind.LOCK_CYCLE.value, since, at,
                     f"{said}: a wait-for cycle on file locks, each asleep in the kernel's lock wait at every sample "
                     f"for {at - since:.1f} s ({max(cpu_used(run) for run in runs):.2f} s CPU at most); none can take "
                     "its lock until another lets go, and none runs to let go", subject.node_pid)
    return None


def _waited(bundle: Bundle, proc: ProcessInfo) -> FileLock | None:
    """The file lock `proc` sleeps on at the last sample, where /proc/locks names its holder."""
    sample = bundle.last.sample_of(proc.pid)
    stat = sample.proc if sample is not None and sample.alive else None
    if stat is None or not stat.full or not stat.in_file_lock:
        return None
    return next((lock for lock in stat.locks if lock.holder_pid), None)


def _cycle_from(bundle: Bundle, first: ProcessInfo) -> list[tuple[ProcessInfo, FileLock]] | None:
    """From `first`, each process of the job with the file lock it waits for, following each lock
    to its holder, until the chain comes back to `first`; None where it ends or loops elsewhere."""
    chain: list[tuple[ProcessInfo, FileLock]] = []
    proc: ProcessInfo | None = first
    while proc is not None and len(chain) < CYCLE_LIMIT:
        lock = _waited(bundle, proc)
        if lock is None or any(p.pid == proc.pid for p, _ in chain):
            return None
        chain.append((proc, lock))
        # /proc/locks names the holder by its pid on the node; a merge may have renumbered the job's pids.
        proc = bundle.job.info(proc.pid - proc.node_pid + lock.holder_pid)
        if proc is not None and proc.pid == first.pid:
            return chain
    return None


def _waits_for(lock: FileLock) -> Fact:
    """Asleep on a file lock (wchan), /proc/locks showing the same lock with the same holder."""
    def holds(sample: ProcSample) -> bool | None:
        proc = sample.proc
        if proc is None or not proc.full:
            return None
        if proc.in_file_lock and not proc.locks:
            return None             # /proc/locks unread, or the wait ended between the kernel's two answers
        return proc.in_file_lock and any(seen.inode == lock.inode and seen.holder_pid == lock.holder_pid
                                         for seen in proc.locks)
    return holds


def _pdb_prompt(bundle: Bundle, rank: ProcessInfo, workers: list[ProcessInfo], reading: Reading) -> Proof | None:
    """The rank's main thread in pdb's command loop reading stdin, stopped at the same line at
    every sample: the job runs no further until someone answers the prompt."""
    last = bundle.last.sample_of(rank.pid)
    key = signature(last) if last is not None else ()
    if not key:
        return None

    def at_prompt(sample: ProcSample) -> bool | None:
        if sample.stack is None:
            return None
        return signature(sample) == key and classify_rank(sample).detail == Wait.DEBUGGER

    run = agreeing(bundle, rank.pid, at_prompt)
    if not proven(run):
        return None
    frame = own_frame(key)
    stdin = next((link for link in last.proc.fd_links if link.fd == 0), None) if last.proc is not None else None
    reads = f" reading its stdin ({stdin.target})" if stdin is not None else " reading its stdin"
    return Proof(ProofKind.PDB_PROMPT.value, run[0][0], run[-1][0],
                 f"{named(rank)} sits at a pdb prompt{reads}, stopped at {frame.label if frame else '?'} at every "
                 f"sample for {run[-1][0] - run[0][0]:.1f} s ({cpu_used(run):.2f} s CPU): it runs nothing until "
                 "someone answers the prompt", rank.node_pid)


def _dead_producer(bundle: Bundle, rank: ProcessInfo, workers: list[ProcessInfo], reading: Reading) -> Proof | None:
    """The rank's main thread waits on a queue or event (a handoff from its own line), a thread of
    the job's own code seen in an earlier stack of it is in none since, and no thread of the job's
    code but the main one is left to feed it."""
    stacks = [(snap.time, s.stack) for snap in bundle.samples[-RUN_LIMIT:]
              if (s := snap.sample_of(rank.pid)) is not None and s.alive and s.stack is not None]
    if len(stacks) < 3:
        return None
    now = stacks[-1][1]
    if any(own_frame(t.frames) is not None for t in now.threads if not t.is_main):
        return None
    alive = {t.tid for t in now.threads}
    gone: dict[int, tuple[float, Thread]] = {}
    for time, stack in stacks:
        for thread in stack.threads:
            if not thread.is_main and thread.tid not in alive and own_frame(thread.frames) is not None:
                gone[thread.tid] = (time, thread)
    if not gone:
        return None
    last_seen, thread = max(gone.values(), key=lambda item: item[0])

    def waits_unfed(sample: ProcSample) -> bool | None:
        if sample.stack is None:
            return None
        tids = {t.tid for t in sample.stack.threads}
        return thread.tid not in tids and classify_rank(sample).detail == Wait.THREAD

    run = [(t, s) for t, s in agreeing(bundle, rank.pid, waits_unfed) if t > last_seen]
    if not proven(run):
        return None
    frame = own_frame(signature(run[-1][1]))
    return Proof(ProofKind.DEAD_PRODUCER.value, run[0][0], run[-1][0],
                 f"{named(rank)} waits at {frame.label if frame else '?'} for its thread {thread.name!r} "
                 f"({thread.tid:#x}), which is gone: in none of its stacks for {run[-1][0] - last_seen:.1f} s, last seen at "
                 f"{own_frame(thread.frames).label}, and no thread of the job's own code is left to feed the wait",
                 rank.node_pid)


def first_proof(proofs: Sequence[Proof]) -> Proof | None:
    """The most telling of several proofs (ProofKind's order), the earliest of a kind."""
    order = [k.value for k in ProofKind]
    return min(proofs, key=lambda p: (order.index(p.kind), p.since), default=None)


def named_culprits(held: Sequence[tuple[int | None, Proof]]) -> tuple[int, ...]:
    """The ranks the proofs that ranks hold name: each its own rank, or the ranks it names instead
    (peer-gone: the peer that left)."""
    named = {n for rank, proof in held for n in (proof.culprits if proof.culprits is not None else (rank,))}
    return tuple(sorted(n for n in named if n is not None))
