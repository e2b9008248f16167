"""What every proof of a hang is made of (`analyze/proofs.py`, `analyze/cutoff.py`): a fact seen at
the trailing samples of a process, its CPU flat over them, for at least PROOF_SPAN_S; and the
words that name the processes it holds of. Pure.
"""
from __future__ import annotations

from collections.abc import Callable

from hangdoc.analyze.classify import own_frame, signature
from hangdoc.analyze.timeline import CPU_NOISE_S
from hangdoc.model import Bundle, ProcessInfo, ProcSample, Role, Snapshot

PROOF_SPAN_S = 1.5     # seconds two agreeing samples must span: the default interval's second sample
RUN_LIMIT = 64         # samples looked back through for the first that showed a fact

# holds(sample) -> True: the fact holds at this sample; False: it does not; None: this sample
# cannot tell (no stack read this round, a light /proc read).
Fact = Callable[[ProcSample], "bool | None"]
# The same, of a sample read beside the others of its round (a fact about several processes).
RoundFact = Callable[[Snapshot, ProcSample], "bool | None"]
Run = list[tuple[float, ProcSample]]


def alive(bundle: Bundle, pid: int) -> bool:
    sample = bundle.last.sample_of(pid)
    return sample is not None and sample.alive and (sample.proc is None or sample.proc.state not in ("Z", "X"))


def agreeing(bundle: Bundle, pid: int, holds: Fact) -> Run:
    """The trailing run of samples of `pid` at which `holds`, its CPU flat over the run (within
    CPU_NOISE_S of the last): empty where the last sample that can tell says it does not."""
    return agreeing_in(bundle, pid, lambda _, sample: holds(sample))


def agreeing_in(bundle: Bundle, pid: int, holds: RoundFact) -> Run:
    """`agreeing`, for a fact read of the sample beside its round's others."""
    run: Run = []
    end_cpu = None
    for snapshot in reversed(bundle.samples[-RUN_LIMIT:]):
        sample = snapshot.sample_of(pid)
        if sample is None or not sample.alive:
            break
        said = holds(snapshot, sample)
        if said is None:
            continue
        cpu = sample.proc.cpu_s if sample.proc is not None else None
        if not said or cpu is None or (end_cpu is not None and end_cpu - cpu > CPU_NOISE_S):
            break
        end_cpu = cpu if end_cpu is None else end_cpu
        run.append((snapshot.time, sample))
    run.reverse()
    return run


def proven(run: Run) -> bool:
    return len(run) >= 2 and run[-1][0] - run[0][0] >= PROOF_SPAN_S


def still_since(bundle: Bundle, pid: int, since: float) -> bool:
    """`pid` used no CPU (within CPU_NOISE_S) over the samples from `since` on that read it."""
    cpu = [s.proc.cpu_s for snap in bundle.samples[-RUN_LIMIT:] if snap.time >= since
           and (s := snap.sample_of(pid)) is not None and s.proc is not None]
    return len(cpu) < 2 or cpu[-1] - cpu[0] <= CPU_NOISE_S


def named(rank: ProcessInfo, worker: ProcessInfo | None = None) -> str:
    who = f"rank {rank.rank}" if rank.rank is not None else f"pid {rank.node_pid}"
    if worker is None:
        return f"{who} (pid {rank.node_pid})"
    index = worker.worker_index if worker.worker_index is not None else "?"
    return f"{who}'s DataLoader worker {index} (pid {worker.node_pid})"


def cpu_used(run: Run) -> float:
    return run[-1][1].proc.cpu_s - run[0][1].proc.cpu_s


def who(bundle: Bundle, proc: ProcessInfo, short: bool = False) -> str:
    """A process of the job in the proof's words: "rank 0 (pid 10)", "rank 1's DataLoader worker 2
    (pid 21)"; `short`: without the pid, once the process was named with it."""
    owner = bundle.job.info(proc.rank_pid) if proc.rank_pid not in (None, proc.pid) else None
    if proc.role is Role.RANK or (proc.role is Role.WORKER and owner is not None):
        said = named(proc) if proc.role is Role.RANK else named(owner, proc)
        return said.split(" (pid ")[0] if short else said
    whose = f"rank {owner.rank}'s " if owner is not None and owner.rank is not None else ""
    return f"{whose}{'child process' if proc.role is Role.CHILD else proc.role.value} (pid {proc.node_pid})"


def at_line(run: Run) -> str:
    """" at" the job's own line it waits at, from its latest stack read; empty where none showed one."""
    sample = next((s for _, s in reversed(run) if s.stack is not None), None)
    frame = own_frame(signature(sample)) if sample is not None else None
    return f" at {frame.label}" if frame is not None else ""
