"""NCCL's shape of a wait, written on CPU: collectives return at once, the host waits at the next sync.

On NCCL, `dist.all_reduce` queues the collective on the GPU stream and returns at once; the host
thread blocks later, at the next line of the job that needs a value from the GPU (`loss.item()`
for the log line), where CUDA spins the CPU at 100 % under the job's own line, with no torch
frame above it. Here the gradients are all-reduced with `async_op=True` (as a hand-written data
parallel loop does, following torch.distributed's own examples) and `host_value` stands for
`.item()` on a stream that holds those collectives: it spins until they are done.

    spin-data-stall   3 ranks; at step 25 rank 2's DataLoader worker blocks opening its next shard
                      (a dead mount); ranks 0 and 1 spin at their sync line for ever: a hang, rank 2
    spin-straggler    rank 1 computes 0.6 s more each step (a one-rank metric); the others spin at
                      their sync line most of each step: slow, rank 1
    spin-healthy      every rank computes alike and spins a little at its sync line: healthy
    spin-eval-pause   every 15 steps rank 0 evaluates 32 batches (~8 s, its own counters moving)
                      while the others spin at their sync line: healthy

Markers in --workdir as in train.py: ready.<rank> after the first step, `fault` when the stall begins.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from rhythm import busy_for, run_job     # torchrun runs this file as a script: its siblings import by name

RANK = int(os.environ.get("RANK", "0"))
STALL_STEP = 25


class Shards(IterableDataset):
    """Feature batches read from the job's shard files, one worker a stream; in spin-data-stall
    rank 2's worker opens a FIFO nobody writes once its stream reaches STALL_STEP: open() blocks
    in the kernel, as on a mount whose server went away."""

    def __init__(self, files: list[str], workdir: Path, stall: bool):
        self.files, self.workdir, self.stall = files, workdir, stall

    def __iter__(self):
        worker = get_worker_info()
        generator = torch.Generator().manual_seed(1000 * RANK + (worker.id if worker else 0))
        for i in range(10 ** 9):
            if self.stall and i == STALL_STEP * 2:
                dead = self.workdir / f"dead-mount.{RANK}"
                if not dead.exists():
                    os.mkfifo(dead)
                (self.workdir / "fault").write_text(json.dumps(
                    {"time": time.time(), "rank": RANK, "pid": os.getpid(), "what": f"worker opens {dead.name}"}))
                with open(dead, "rb") as shard:      # blocks here for ever: no writer
                    shard.read()
            with open(self.files[i % len(self.files)], "rb") as shard:
                shard.read(4096)
            yield torch.randn(8, 32, generator=generator), torch.randint(0, 4, (8,), generator=generator)


def host_value(tensor: torch.Tensor, pending: list) -> float:
    """`tensor.item()` as CUDA runs it behind NCCL: the value is ready once the work queued before
    it is done, and the host spins at this line until then (cudaStreamSynchronize's busy wait)."""
    for work in pending:
        while not work.is_completed(): pass   # noqa: E701 (one line: the spin stands at one line)
    return float(tensor)


def evaluate(model: nn.Module, batches: int) -> float:
    total = 0.0
    with torch.no_grad():
        for batch_idx in range(batches):
            busy_for(0.25)
            total += float(model(torch.randn(8, 32)).sum())
    return total


def train(args) -> None:
    world = dist.get_world_size()
    files = [line.strip() for line in args.data_list.read_text().splitlines() if line.strip()]
    stall = args.scenario == "spin-data-stall" and RANK == 2
    loader = DataLoader(Shards(files, args.workdir, stall), batch_size=None, num_workers=args.num_workers)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    for p in model.parameters():                  # every rank starts from rank 0's weights
        dist.broadcast(p.data, 0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    extra = 0.6 if args.scenario == "spin-straggler" and RANK == 1 else 0.0
    step = 0
    for step, (x, y) in enumerate(loader):
        if step >= args.max_steps:
            break
        busy_for(0.05 + extra)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        pending = [dist.all_reduce(p.grad, async_op=True) for p in model.parameters()]
        loss_value = host_value(loss, pending)    # the log line's .item(): every rank waits here
        for p in model.parameters():
            p.grad /= world
        optimizer.step()
        if step == 0:
            (args.workdir / f"ready.{RANK}").touch()
        if step % 20 == 0:
            print(f"[rank {RANK}] step {step} loss {loss_value:.3f}", flush=True)
        if args.scenario == "spin-eval-pause" and step % 15 == 14 and RANK == 0:
            evaluate(model, batches=32)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True,
                   choices=["spin-data-stall", "spin-straggler", "spin-healthy", "spin-eval-pause"])
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("--data-list", required=True, type=Path)
    p.add_argument("--num-workers", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=10 ** 9)
    p.add_argument("--timeout", type=float, default=600.0, help="process-group timeout, seconds")
    args, _ = p.parse_known_args(argv)
    return run_job(args, train)


if __name__ == "__main__":
    sys.exit(main())
