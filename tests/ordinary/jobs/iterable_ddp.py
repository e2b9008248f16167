"""DDP classification from a streaming IterableDataset, sharded by rank and by worker.

    torchrun --nproc_per_node=3 iterable_ddp.py --output-dir DIR

Every (rank, worker) pair reads every (world * workers)-th chunk, so all ranks see the same
number of batches. Validates after every epoch and logs a line per epoch on rank 0.
"""
import argparse
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

FEATURES, CLASSES = 48, 8


class Stream(IterableDataset):
    """Synthetic samples made chunk by chunk from a seed, as if read from a stream of files."""

    def __init__(self, chunks, chunk_size=256, seed=0):
        self.chunks, self.chunk_size, self.seed = chunks, chunk_size, seed
        g = torch.Generator().manual_seed(1234)
        self.centres = torch.randn(CLASSES, FEATURES, generator=g) * 0.3

    def __iter__(self):
        rank = dist.get_rank() if dist.is_initialized() else 0
        world = dist.get_world_size() if dist.is_initialized() else 1
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        stride = world * workers
        for chunk in range(rank * workers + worker, self.chunks, stride):
            g = torch.Generator().manual_seed(self.seed * 100003 + chunk)
            labels = torch.randint(CLASSES, (self.chunk_size,), generator=g)
            x = self.centres[labels] + torch.randn(self.chunk_size, FEATURES, generator=g)
            for i in range(self.chunk_size):
                yield x[i], labels[i]


def evaluate(model, loader):
    model.eval()
    totals = torch.zeros(3)
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            totals += torch.tensor([F.cross_entropy(logits, y, reduction="sum").item(),
                                    (logits.argmax(1) == y).sum().item(), len(y)])
    dist.all_reduce(totals)
    model.train()
    return totals[0] / totals[2], totals[1] / totals[2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR", "."))
    parser.add_argument("--epochs", type=int, default=9)
    args = parser.parse_args()

    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    per_pair = 8       # chunks per (rank, worker) per epoch: equal for every rank
    train = Stream(chunks=world * 2 * per_pair, seed=1)
    val = Stream(chunks=world * 2, seed=2)
    train_loader = DataLoader(train, batch_size=32, num_workers=2)
    val_loader = DataLoader(val, batch_size=64, num_workers=2)

    model = DDP(nn.Sequential(nn.Linear(FEATURES, 384), nn.GELU(), nn.Linear(384, 384), nn.GELU(),
                              nn.Linear(384, CLASSES)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    started = time.time()
    for epoch in range(args.epochs):
        running, batches = 0.0, 0
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running, batches = running + loss.item(), batches + 1
            if epoch == 0 and batches == 1 and rank == 0 and os.environ.get("HANGDOC_TEST_READY"):
                Path(os.environ["HANGDOC_TEST_READY"]).write_text("started")
        val_loss, accuracy = evaluate(model, val_loader)
        if rank == 0:
            print(f"epoch {epoch} train_loss {running / max(batches, 1):.4f} val_loss {val_loss:.4f} "
                  f"acc {accuracy:.3f} ({batches} batches, {time.time() - started:.1f}s)", flush=True)
    if rank == 0 and not math.isnan(val_loss):
        torch.save(model.module.state_dict(), Path(args.output_dir) / "model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
