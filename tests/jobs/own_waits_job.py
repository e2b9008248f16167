"""A 2-rank gloo job that hangs in its own code, not in its data: the non-data waits.

--mode breakpoint   rank 0 meets a breakpoint() left in at step 5; its stdin is a pipe nobody
                    writes (as under ssh without -n, or `docker run -i`), so pdb's prompt waits
--mode flock        rank 0 starts WORKDIR/sync_shards.py, which takes WORKDIR/shard.lock with flock()
                    and keeps it; at its 4th sample a rank-1 DataLoader worker asks for the same
                    lock and sleeps
--mode subprocess   rank 1 runs subprocess.run(["cat", FIFO]) at step 5, no timeout; nobody
                    ever opens the FIFO for writing, so cat blocks opening it
--mode thread-died  rank 1's batches come from a prefetch thread through a queue.Queue; the
                    thread raises --fault-after s after rank 1's first step and dies; the main
                    thread waits in Queue.get for ever
Rank r writes WORKDIR/ready.r after its first step; the process about to block writes WORKDIR/fault.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

RANK = int(os.environ.get("RANK", "0"))
HOLDER = ("import fcntl, os, sys, time\n"
          "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
          "fcntl.flock(fd, fcntl.LOCK_EX)\n"
          "open(sys.argv[2], 'w').close()\n"
          "while True:\n"
          "    time.sleep(3600)\n")


def mark_fault(workdir: Path, what: str) -> None:
    path = workdir / "fault"
    if not path.exists():
        path.write_text(f"{time.time()} rank {RANK} pid {os.getpid()}: {what}\n")
    print(f"[rank {RANK}] fault: {what}", flush=True)


def wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {timeout} s")
        time.sleep(0.05)


class Shards(Dataset):
    """Samples of a shard; in --mode flock, rank 1's 4th sample takes the shard's lock first."""

    def __init__(self, mode: str, workdir: Path):
        self.mode, self.workdir = mode, workdir

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.mode == "flock" and RANK == 1 and index == 3:
            lock = self.workdir / "shard.lock"
            wait_for(self.workdir / "shard.lock.held")
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            mark_fault(self.workdir, f"worker pid {os.getpid()} takes the lock on {lock}")
            fcntl.flock(fd, fcntl.LOCK_EX)      # held by rank 0's child: sleeps here
        return torch.full((4,), float(index))


def prefetch(batches: queue.Queue, fail_at: list[float]) -> None:
    step = 0
    while True:
        if time.monotonic() >= fail_at[0]:
            raise RuntimeError(f"shard {step % 7} is corrupt")
        batches.put(torch.full((4,), float(step)))
        step += 1


def thread_batches(workdir: Path, fault_after: float):
    """Batches from a prefetch thread (rank 1 in --mode thread-died)."""
    batches: queue.Queue = queue.Queue(maxsize=2)
    fail_at = [float("inf")]
    threading.Thread(target=prefetch, args=(batches, fail_at), name="prefetch", daemon=True).start()
    while True:
        batch = batches.get()                # waits here for ever once the thread is gone
        yield batch
        if fail_at[0] == float("inf"):
            fail_at[0] = time.monotonic() + fault_after
            mark_fault(workdir, f"prefetch thread dies in {fault_after} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--mode", required=True, choices=("breakpoint", "flock", "subprocess", "thread-died"))
    parser.add_argument("--fault-after", type=float, default=4.0)
    args = parser.parse_args()
    workdir = args.workdir
    if args.mode == "flock" and RANK == 0:
        lock, tool = workdir / "shard.lock", workdir / "sync_shards.py"
        tool.write_text(HOLDER)             # a shard-sync tool that takes the lock and keeps it
        subprocess.Popen([sys.executable, str(tool), str(lock), str(lock) + ".held"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    dist.init_process_group("gloo")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.mode == "thread-died" and RANK == 1:
        batches = thread_batches(workdir, args.fault_after)
    else:
        workers = 1 if args.mode == "flock" else 0
        batches = iter(DataLoader(Shards(args.mode, workdir), batch_size=1, num_workers=workers))
    for step in range(1_000_000):
        batch = next(batches).reshape(-1, 4)
        loss = model(batch).sum()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()
        if step == 0:
            (workdir / f"ready.{RANK}").write_text(str(os.getpid()))
        if step == 5 and args.mode == "breakpoint" and RANK == 0:
            read_end, write_end = os.pipe()
            os.dup2(read_end, 0)             # stdin: a pipe whose writer (this process) never writes
            mark_fault(workdir, "breakpoint() at step 5")
            breakpoint()
            print("resumed", write_end)
        if step == 5 and args.mode == "subprocess" and RANK == 1:
            fifo = workdir / "manifest.fifo"
            os.mkfifo(fifo)
            mark_fault(workdir, f"subprocess.run(['cat', {str(fifo)!r}])")
            subprocess.run(["cat", str(fifo)], stdout=subprocess.DEVNULL)
        time.sleep(0.05)


if __name__ == "__main__":
    main()
