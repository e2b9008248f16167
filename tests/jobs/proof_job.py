"""A 2-rank gloo job whose rank 1 hangs in a way a fact proves, or shows that fact's look-alike
and goes on: the jobs of the proofs' latency bench (benchmarks/bench_proofs.py).

--mode train         trains --steps steps and ends (the bench stops rank 1 itself: SIGSTOP)
--mode pdb           rank 1 meets a breakpoint() at --fault-step, its stdin a pipe nobody writes
--mode pdb-answered  the same breakpoint, answered ("c") 1 s later from the pipe's other end
--mode producer-died rank 1's batches come from a thread through a queue.Queue; at --fault-step
                     the thread raises and dies; the main thread waits in Queue.get for ever
--mode producer-slow the same thread stalls 3 s once at --fault-step, then feeds on
--mode fork-lock     rank 1's DataLoader workers are forked while a thread of rank 1 holds a
                     threading.Lock they take at --fault-step: they wait on it for ever
--mode lock-free     the same workers take and release their own copy of the lock, held by no one
--mode lock-cycle    at --fault-step rank 0 takes WORKDIR/cache.lock then dl.lock (flock), and rank 1's
                     DataLoader worker dl.lock then cache.lock, each once the other holds its first:
                     a wait-for cycle, both asleep in flock for ever
--mode lock-turns    from --fault-step rank 0 and rank 1's worker take cache.lock in turn, each holding
                     it 0.02 s: the other waits, then goes on
--mode pipe-self     at --fault-step rank 1's DataLoader worker forks a decoder that writes its output
                     to a pipe and exits; the worker kept its own copy of the write end, so its read
                     to the end of the pipe waits for ever
--mode pipe-closed   the same decoder writes four chunks 0.5 s apart (the worker reads, a writer alive)
                     and exits; the worker closed its copy, sees the end and goes on
--mode peer-left     after its all-reduce of --fault-step rank 1 forks a child that keeps its sockets
                     open, and leaves with code 0 (its data ran out); rank 0 waits in the next
                     all-reduce for ever (gloo sees no closed connection)
--mode peer-left-late rank 1 does the same after the last step; rank 0 saves a checkpoint for 3 s
                     (no collective) and ends
Rank r writes WORKDIR/ready.r (its pid) after its first step; the fault, or the look-alike's start,
writes WORKDIR/fault ("<time> what") once, as it happens.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import queue
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

RANK = int(os.environ.get("RANK", "0"))
LOCK = threading.Lock()
MODES = ("train", "pdb", "pdb-answered", "producer-died", "producer-slow", "fork-lock", "lock-free", "lock-cycle",
         "lock-turns", "pipe-self", "pipe-closed", "peer-left", "peer-left-late")


def mark_fault(workdir: Path, what: str, at: float | None = None) -> None:
    path = workdir / "fault"
    if not path.exists():
        path.write_text(f"{time.time() if at is None else at} rank {RANK} pid {os.getpid()}: {what}\n")
    print(f"[rank {RANK}] fault: {what}", flush=True)


def take_locks(workdir: Path, mode: str, first: str, second: str, mine: str, theirs: str) -> None:
    """lock-cycle: flock `first`, wait until the other side holds its own first, flock `second` (for
    ever: the other holds it). lock-turns: flock cache.lock for 0.02 s and let go."""
    if mode == "lock-turns":
        fd = os.open(workdir / "cache.lock", os.O_RDWR | os.O_CREAT)
        mark_fault(workdir, "rank 0 and rank 1's worker take cache.lock in turn")
        fcntl.flock(fd, fcntl.LOCK_EX)
        time.sleep(0.02)
        os.close(fd)
        return
    held, other = workdir / mine, workdir / theirs
    fds = [os.open(workdir / name, os.O_RDWR | os.O_CREAT) for name in (first, second)]
    fcntl.flock(fds[0], fcntl.LOCK_EX)
    held.write_text(str(os.getpid()))
    while not other.exists():
        time.sleep(0.01)
    mark_fault(workdir, f"pid {os.getpid()} holds {first} and takes {second}: a wait-for cycle")
    fcntl.flock(fds[1], fcntl.LOCK_EX)


def decode_through_pipe(workdir: Path, mode: str) -> bytes:
    """A decoder process writes the clip to a pipe; the worker reads it to the end of the pipe.
    pipe-self: the worker keeps its own copy of the write end (no os.close after the fork)."""
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.close(read_end)
        for _ in range(4 if mode == "pipe-closed" else 1):
            os.write(write_end, b"pcm" * 100)
            if mode == "pipe-closed":
                time.sleep(0.5)
        os._exit(0)
    if mode == "pipe-closed":
        os.close(write_end)
    mark_fault(workdir, f"worker pid {os.getpid()} reads the decoder's pipe to its end "
                        f"({'its own write end closed' if mode == 'pipe-closed' else 'holding its own write end'})")
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    return data


def leave_with_a_child_holding_sockets(workdir: Path) -> None:
    """A child forked now holds every descriptor of the rank, its process group's sockets among them,
    until rank 0 is done or gone (at most 120 s): the rank's exit closes no connection of gloo's."""
    rank0 = int((workdir / "ready.0").read_text())
    if os.fork() == 0:
        deadline = time.time() + 120
        while time.time() < deadline and os.path.exists(f"/proc/{rank0}") and not (workdir / "done.0").exists():
            time.sleep(0.1)
        os._exit(0)
    mark_fault(workdir, "rank 1 leaves with code 0; a child it forked holds its sockets")


class Samples(IterableDataset):
    """Endless samples; in the lock modes, from --fault-step on each one takes LOCK first."""

    def __init__(self, mode: str, workdir: Path, fault_step: int):
        self.mode, self.workdir, self.fault_step = mode, workdir, fault_step

    def __iter__(self):
        n = 0
        while True:
            if self.mode in ("fork-lock", "lock-free") and RANK == 1 and n >= self.fault_step:
                if n == self.fault_step:
                    mark_fault(self.workdir, f"worker pid {os.getpid()} takes the lock (held at fork: "
                                             f"{LOCK.locked()})")
                with LOCK:
                    pass
            if self.mode in ("lock-cycle", "lock-turns") and RANK == 1 and n >= self.fault_step:
                if self.mode == "lock-turns" or n == self.fault_step:
                    take_locks(self.workdir, self.mode, "dl.lock", "cache.lock", "held.worker", "held.rank0")
            if self.mode.startswith("pipe") and RANK == 1 and n == self.fault_step:
                decode_through_pipe(self.workdir, self.mode)
            yield torch.full((4,), float(n))
            n += 1


def produce(batches: queue.Queue, mode: str, workdir: Path, fault_step: int) -> None:
    step = 0
    while True:
        if step == fault_step + 2:     # the queue holds two: the rank waits once they are used
            if mode == "producer-died":
                mark_fault(workdir, "the prefetch thread dies")
                raise RuntimeError(f"shard {step % 7} is corrupt")
            mark_fault(workdir, "the prefetch thread stalls for 3 s")
            time.sleep(3.0)
        batches.put(torch.full((4,), float(step)))
        step += 1


def thread_batches(mode: str, workdir: Path, fault_step: int):
    batches: queue.Queue = queue.Queue(maxsize=2)
    threading.Thread(target=produce, args=(batches, mode, workdir, fault_step), name="prefetch", daemon=True).start()
    while True:
        yield batches.get()


def hold_lock_forever() -> None:
    LOCK.acquire()                     # a metrics thread that took the lock and never gave it back
    while True:
        time.sleep(3600)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--mode", required=True, choices=MODES)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--fault-step", type=int, default=40)
    args = parser.parse_args()
    workdir, mode = args.workdir, args.mode
    dist.init_process_group("gloo")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if mode.startswith("producer") and RANK == 1:
        batches = thread_batches(mode, workdir, args.fault_step)
    else:
        if mode == "fork-lock" and RANK == 1:
            threading.Thread(target=hold_lock_forever, name="metrics", daemon=True).start()
            while not LOCK.locked():
                time.sleep(0.01)
        workers = 1 if mode in ("fork-lock", "lock-free", "lock-cycle", "lock-turns", "pipe-self", "pipe-closed") else 0
        batches = iter(DataLoader(Samples(mode, workdir, args.fault_step), batch_size=1, num_workers=workers))
    for step in range(args.steps):
        optimizer.zero_grad()
        if mode in ("lock-cycle", "lock-turns") and RANK == 0 and step >= args.fault_step:
            if mode == "lock-turns" or step == args.fault_step:
                take_locks(workdir, mode, "cache.lock", "dl.lock", "held.rank0", "held.worker")
        model(next(batches).reshape(-1, 4)).sum().backward()
        for grad in [p.grad for p in model.parameters()]:
            dist.all_reduce(grad)
        optimizer.step()
        if step == 0:
            (workdir / f"ready.{RANK}").write_text(str(os.getpid()))
        last = step == args.steps - 1
        if RANK == 1 and ((mode == "peer-left" and step == args.fault_step) or (mode == "peer-left-late" and last)):
            leave_with_a_child_holding_sockets(workdir)
            return
        if step == args.fault_step and mode.startswith("pdb") and RANK == 1:
            read_end, write_end = os.pipe()
            os.dup2(read_end, 0)             # stdin: a pipe only this process could write
            if mode == "pdb-answered":
                threading.Timer(1.0, os.write, args=(write_end, b"c\n")).start()
            mark_fault(workdir, "breakpoint() at step %d" % step)
            breakpoint()
        print(f"[rank {RANK}] step {step}", flush=True)
        time.sleep(0.05)
    if mode == "peer-left-late":
        (workdir / "done.0").write_text("saving")
        time.sleep(3.0)                  # rank 0 saves its checkpoint: no collective
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
