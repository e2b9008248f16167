"""A DDP job on gloo whose ranks part ways in their own code, the ways users' reports show.

--mode swallow      metrics gathered every step inside `try/except: continue`; one rank's recall
                    divides by zero, the handler swallows it, that rank skips the gather
--mode earlystop    early stopping decided on each rank's own validation loss; the last rank stops
--mode handler      a bad batch's exception reaches one rank's `except`, which broadcasts an
                    emergency checkpoint name while the others all-reduce
--mode ddpval       rank-0-only validation through the DDP wrapper; BatchNorm buffers make DDP's
                    forward broadcast them while the others wait in a barrier
--mode clock        a checkpoint "every 2 s" decided from each rank's own clock
--mode rank0gather  `if rank == 0: dist.all_gather_object(...)`
--mode earlyreturn  a metrics helper that returns early on a rank with no metrics
The last rank (`--culprit`, default world - 1) is the one whose path leaves. Each rank writes
WORKDIR/ready.r after its first step; the leaving rank writes WORKDIR/fault as it leaves.
"""
import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

FAULT_STEP = 12


class Clips(Dataset):
    """Feature vectors with a label; item FAULT_STEP of the culprit's shard is undecodable in
    --mode handler (a transcript in the wrong encoding)."""

    def __init__(self, mode, bad_rank):
        self.mode, self.bad_rank = mode, bad_rank

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        if self.mode == "handler" and int(os.environ["RANK"]) == self.bad_rank and i // dist_world() == FAULT_STEP * 4 + 2:
            b"\xff\xfe transcript".decode("utf-8")
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), int(i % 3)


def dist_world():
    return int(os.environ.get("WORLD_SIZE", "1"))


def recall_per_class(pred, labels, rank, culprit, step):
    out = []
    for c in range(3):
        hits = ((pred == c) & (labels == c)).sum().item()
        total = (labels == c).sum().item()
        if rank == culprit and step == FAULT_STEP:
            total = 0                     # a batch with no sample of the class on this rank
        out.append(hits / total)
    return out


def sync_metrics(metrics):
    if not metrics:
        return None
    t = torch.tensor([sum(metrics.values())])
    dist.all_reduce(t)
    return t.item()


def mark(workdir, name):
    Path(workdir, name).write_text(str(time.time()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--culprit", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=1000)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    culprit = world - 1 if args.culprit is None else args.culprit
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 3))
    # The default keeps BatchNorm's buffers in sync by a broadcast in every forward; a job that
    # turned it off meets the gradient all-reduce first.
    model = DDP(model, broadcast_buffers=args.mode in ("ddpval", "handler", "earlystop", "earlyreturn"))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Clips(args.mode, culprit)
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, shuffle=False), num_workers=2)
    best = float("inf")
    early_stop = False
    last_ckpt = time.time() + (0.6 if rank == culprit else 0.0)   # this rank finished its setup later
    it = iter(loader)
    for epoch in range(args.epochs):
        for batch_idx in range(8):
            step = epoch * 8 + batch_idx
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
            except Exception as e:
                print(f"rank {rank}: bad batch at step {step}: {type(e).__name__}", flush=True)
                mark(args.workdir, "fault")
                name = [f"emergency-{step}.pt"]
                dist.broadcast_object_list(name, src=rank)
                continue
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 0:
                mark(args.workdir, f"ready.{rank}")
            if args.mode == "swallow":
                try:
                    pred = model.module(x).argmax(1)
                    recall = recall_per_class(pred, y, rank, culprit, step)
                    gathered = [None] * world
                    dist.all_gather_object(gathered, recall)
                except Exception:
                    if step == FAULT_STEP:
                        mark(args.workdir, "fault")
                    continue
            if args.mode == "clock" and time.time() - last_ckpt > 2.0:
                if step > 2:
                    mark(args.workdir, "fault")
                dist.barrier()
                last_ckpt = time.time()
            if args.mode == "rank0gather" and step == FAULT_STEP:
                mark(args.workdir, "fault")
            if args.mode == "rank0gather" and rank == 0 and step >= FAULT_STEP:
                gathered = [None] * world
                dist.all_gather_object(gathered, loss.item())
            if args.mode == "earlyreturn":
                metrics = {} if (rank == culprit and step == FAULT_STEP) else {"loss": loss.item()}
                if not metrics:
                    mark(args.workdir, "fault")
                sync_metrics(metrics)
            time.sleep(0.03)
        if args.mode == "earlystop":
            val_loss = 1.0 / (epoch + 1) + (0.5 if rank == culprit and epoch >= 1 else 0.0)
            if val_loss < best:
                best = val_loss
            elif epoch >= 1:
                early_stop = True
            if early_stop:
                mark(args.workdir, "fault")
                break
        if args.mode == "ddpval" and epoch >= 1:
            if rank == 0:
                mark(args.workdir, "fault")
                model.eval()
                val = model(torch.randn(8, 16))
                print(f"val {val.sum().item():.3f}", flush=True)
                model.train()
            dist.barrier()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
