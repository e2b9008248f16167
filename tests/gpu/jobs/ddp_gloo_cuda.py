"""A 2-rank job on one GPU: gloo carries CUDA tensors, and rank 1's DataLoader stalls.

    torchrun --nproc_per_node=2 ddp_gloo_cuda.py READY_FILE GATE_FILE

Written as a user writes a small job: map-style dataset, DistributedSampler, DataLoader at its
defaults but for two workers, gradients all-reduced by hand and the loss read with `.item()`.
Once GATE_FILE exists, rank 1's workers never return their next sample (a read that hangs);
rank 0 goes on to its next all_reduce and waits there. READY_FILE is written by rank 0 at its
20th step. DEVICE=cpu runs the same job without a GPU.
"""
from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Clips(Dataset):
    def __init__(self, size: int, rank: int, gate: str) -> None:
        self.size, self.rank, self.gate = size, rank, gate

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        if self.rank == 1 and os.path.exists(self.gate):
            time.sleep(3600)             # the read that never returns
        g = torch.Generator().manual_seed(index)
        return torch.randn(64, generator=g), index % 10


def main() -> None:
    ready_path, gate = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    device = torch.device(os.environ.get("DEVICE", "cuda"))
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Clips(100_000, rank, gate)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=2)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            value = loss.item()
            step += 1
            if rank == 0 and step == 20:
                with open(ready_path, "w") as f:
                    f.write(f"step {step} loss {value:.3f}\n")
            time.sleep(0.02)


if __name__ == "__main__":
    main()
