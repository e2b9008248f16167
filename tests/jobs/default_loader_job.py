"""A healthy 2-rank gloo DDP job with the DataLoader at its defaults, as most scripts leave it.

num_workers=2 and persistent_workers=False: every epoch's iterator forks 2 new workers per rank
and ends them when it runs out; after each epoch a validation loader forks its own 2 and ends
them after the pass. Nothing here is a death.
Rank r writes WORKDIR/ready.r after its first step and prints one line per epoch.
"""
import argparse
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(args) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train = TensorDataset(torch.randn(args.batches * world * 4, 16), torch.randn(args.batches * world * 4, 1))
    sampler = DistributedSampler(train)
    loader = DataLoader(train, batch_size=4, sampler=sampler, num_workers=2)
    val = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8, num_workers=2)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == 1:
                Path(args.workdir, f"ready.{rank}").write_text(str(step))
            time.sleep(args.step_s)
        with torch.no_grad():
            for x, _ in val:
                model.module(x)
                time.sleep(args.step_s / 2)
        print(f"rank {rank}: epoch {epoch} done at step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batches", type=int, default=20, help="training batches per rank and epoch")
    parser.add_argument("--step-s", type=float, default=0.15)
    main(parser.parse_args())
