"""A 2-rank gloo job written as many scripts are: rank 0 downloads the dataset (urllib, into memory)
while every other rank waits for it at a barrier, then all train. The script sits at module level.

--url URL        where rank 0 downloads from (a test's local server that trickles the bytes)
--workdir DIR    rank 0 writes DIR/ready.0 once the response's headers came (its download runs),
                 rank 1 writes DIR/ready.1 before it enters the barrier
"""
from __future__ import annotations

import argparse
import os
import time
import urllib.request
from pathlib import Path

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--url", required=True)
parser.add_argument("--workdir", type=Path, required=True)
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    response = urllib.request.urlopen(args.url, timeout=600)
    (args.workdir / "ready.0").write_text(f"{time.time()}\n")
    data = response.read()
    print(f"[rank 0] downloaded {len(data)} bytes", flush=True)
else:
    (args.workdir / f"ready.{rank}").write_text(f"{time.time()}\n")
dist.barrier()

model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 32))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"[rank {rank}] step {step} loss {loss.item():.3f}", flush=True)
dist.destroy_process_group()
