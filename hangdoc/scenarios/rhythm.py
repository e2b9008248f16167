"""Healthy jobs whose rhythm fooled proxies: slow ranks, tiny collectives, pauses, sync lines.

Each ends by itself and is never a hang; a watchdog that ends them is wrong. No DataLoader,
a tiny model or none: what the ranks move between steps is a few bytes, and they are caught
in the same collective sample after sample.

    slow-rank        rank 1 computes ~4 s a step, rank 0 waits in DDP's gradient all_reduce
    tiny-allreduce   thousands of fast steps of a 1-float all_reduce, always caught there
    validation-pause every 15 steps rank 0 validates for ~8 s; rank 1 waits in a barrier
    sync-line        every rank parks at the same synchronising line each step (a GPU-bound
                     NCCL job's shape: all_reduce of the gradients, then the loss's .item())
    compute-2x       every rank computes each step, rank 1 twice as long (1.0 s against 0.5 s):
                     a straggler that never stops, slow, not hung (--balanced: both 0.5 s)
    jitter           every rank computes 0.2-0.8 s a step at random: they take turns waiting
    longer-samples   a token corpus sorted by length, cut into contiguous chunks: rank 1's samples
                     are 2.3x longer, its attention's compute with their square; workers read
                     each sample from a file. Slow, never a hang

Markers in --workdir as in train.py: ready.<rank> after the first step.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

RANK = int(os.environ.get("RANK", "0"))


def busy_for(seconds: float, size: int = 96) -> None:
    """Real CPU work (matmuls) for a fixed wall time."""
    x = torch.randn(size, size)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        x = torch.tanh(x @ x / size)


def ddp_steps(args, compute_s: float) -> None:
    """A tiny DDP model; rank 1 computes `compute_s` each step before its backward."""
    model = DistributedDataParallel(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.max_steps):
        x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
        if RANK == 1:
            busy_for(compute_s)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()                      # DDP all_reduces 18 floats here
        optimizer.step()
        mark_ready(step, args)


def paced_steps(args, seconds) -> None:
    """A tiny DDP model; each step computes `seconds(step)` on this rank before its backward."""
    model = DistributedDataParallel(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.max_steps):
        x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
        busy_for(seconds(step))
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()                      # the others wait here for the slowest rank
        optimizer.step()
        mark_ready(step, args)


def compute_2x(args) -> None:
    own = 1.0 if RANK == 1 and not args.balanced else 0.5
    paced_steps(args, lambda step: own)


def jitter(args) -> None:
    rng = random.Random(1000 + RANK)
    paced_steps(args, lambda step: rng.uniform(0.2, 0.8))


class TokenFile(torch.utils.data.Dataset):
    """Token sequences stored one after another in a file; a sample is read from its offset."""

    def __init__(self, path: Path, spans: list[tuple[int, int]]):
        self.path, self.spans = path, spans

    def __len__(self) -> int:
        return len(self.spans)

    def __getitem__(self, i: int) -> torch.Tensor:
        offset, length = self.spans[i]
        with open(self.path, "rb") as f:
            f.seek(offset * 8)
            return torch.frombuffer(bytearray(f.read(length * 8)), dtype=torch.int64)


def token_corpus(path: Path, n: int = 400) -> list[tuple[int, int]]:
    """The corpus every rank builds alike (same seed): `n` sequences sorted by length (60-540
    tokens), written to `path`; (offset, length) of each, in that order."""
    rng = random.Random(7)
    lengths = sorted(rng.randint(60, 540) for _ in range(n))
    spans, offset = [], 0
    for length in lengths:
        spans.append((offset, length))
        offset += length
    if not path.exists():
        tmp = path.with_suffix(f".{RANK}.tmp")
        torch.randint(0, 1000, (offset,), dtype=torch.int64).numpy().tofile(tmp)
        os.replace(tmp, path)
    return spans


def longer_samples(args) -> None:
    """A newcomer's job: the corpus sorted by length is cut into contiguous chunks, one per rank,
    so the last rank's samples are the longest (2.3x rank 0's here); each step's attention grows
    with the square of the sample's length. Nothing is wrong but the split."""
    spans = token_corpus(args.workdir / "tokens.bin")
    world = dist.get_world_size()
    chunk = len(spans) // world
    mine = TokenFile(args.workdir / "tokens.bin", spans[RANK * chunk:(RANK + 1) * chunk])
    loader = torch.utils.data.DataLoader(mine, batch_size=1, shuffle=True, num_workers=1,
                                         generator=torch.Generator().manual_seed(RANK))
    embed, mix = torch.randn(1000, 256), torch.randn(256, 256) / 16
    model = DistributedDataParallel(nn.Linear(256, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while step < args.max_steps:
        for tokens in loader:
            seq_len = int(tokens.shape[-1])
            hidden = embed[tokens[0]]
            for _ in range(8):                       # attention layers: the cost grows with the length squared
                weights = torch.softmax(hidden @ hidden.T / 16, dim=-1)
                hidden = torch.tanh(weights @ hidden @ mix)
            loss = model(hidden).mean()
            optimizer.zero_grad()
            loss.backward()                          # rank 0 waits here for rank 1's longer samples
            optimizer.step()
            mark_ready(step, args)
            step += 1
            if step >= args.max_steps:
                break


def tiny_allreduce(args) -> None:
    for step in range(args.max_steps):
        value = torch.tensor([float(step)])
        dist.all_reduce(value)
        mark_ready(step, args)


def validate(model: nn.Module, batches: int) -> float:
    total = 0.0
    for batch_idx in range(batches):
        busy_for(0.25)
        total += float(model(torch.randn(4, 8)).sum())
    return total


def validation_pause(args) -> None:
    model = DistributedDataParallel(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.max_steps):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(0.05)
        mark_ready(step, args)
        if step % 15 == 14:
            if RANK == 0:
                validate(model.module, batches=32)
            dist.barrier()


def sync_line(args) -> None:
    grads = torch.randn(1 << 20)             # 4 MB of "gradients": the wait dominates each step
    for step in range(args.max_steps):
        busy_for(0.02)
        dist.all_reduce(grads)               # every rank is caught here, step after step
        loss = grads[:4].sum().item()
        mark_ready(step, args)
    print(f"[rank {RANK}] last loss {loss:.3f}", flush=True)


def mark_ready(step: int, args) -> None:
    if step == 0:
        (args.workdir / f"ready.{RANK}").touch()


SHAPES = {
    "slow-rank": lambda args: ddp_steps(args, compute_s=4.0),
    "tiny-allreduce": tiny_allreduce,
    "validation-pause": validation_pause,
    "sync-line": sync_line,
    "compute-2x": compute_2x,
    "jitter": jitter,
    "longer-samples": longer_samples,
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True, choices=sorted(SHAPES))
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("--max-steps", type=int, default=10)
    p.add_argument("--timeout", type=float, default=600.0, help="process-group timeout, seconds")
    p.add_argument("--balanced", action="store_true", help="compute-2x without its straggler (the speed-up's yardstick)")
    args, _ = p.parse_known_args(argv)     # the zoo's data options do not apply here
    return run_job(args, _shape)


def _shape(args) -> None:
    SHAPES[args.scenario](args)
    # The DDP model lives on in reference cycles; freed after its process group is destroyed, its
    # reducer's threads end in std::terminate (rank 0 died SIGABRT after "done" now and then).
    gc.collect()


def run_job(args, body) -> int:
    """A job's frame (this file's and spin.py's): one thread, a seed per rank, the gloo group for
    --timeout, `body(args)`, then a barrier and the line that says it is done."""
    torch.set_num_threads(1)
    torch.manual_seed(RANK)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    started = time.monotonic()
    body(args)
    dist.barrier()
    dist.destroy_process_group()
    print(f"[rank {RANK}] {args.scenario}: done after {args.max_steps} steps "
          f"({time.monotonic() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
