"""Plain DDP regression on CPU: a map-style dataset, DistributedSampler, DataLoader defaults.

    torchrun --nproc_per_node=2 plain_ddp.py --output-dir DIR [--epochs N] [--nccl-shape]

Prints nothing. Rank 0 saves a checkpoint after every epoch. --nccl-shape: no DDP wrapper, the
gradients all-reduced the way NCCL's wait looks on CPU (`all_reduce_async`, then the sync line
spinning). module_loop.py and next_loop.py build the same job from `build` and write their loops
their own way.
"""
import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Regression(Dataset):
    def __init__(self, size, features=64, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, features, generator=g)
        w = torch.randn(features, 1, generator=g)
        self.y = self.x @ w + 0.1 * torch.randn(size, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index]


def parse_args(length="--epochs", default=12):
    """The options every style of this job takes; `length` sets how long it trains."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR", "."))
    parser.add_argument(length, type=int, default=default)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--nccl-shape", action="store_true")
    return parser.parse_args()


def build(nccl_shape=False, batch_size=32):
    """The network, the model to call (DDP-wrapped; in NCCL's shape the bare network, every rank
    starting from rank 0's weights), the optimizer, the sampler and the loader."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))
    if nccl_shape:
        for p in net.parameters():
            dist.broadcast(p.data, 0)
    model = net if nccl_shape else DDP(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dataset = Regression(8192)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=2)
    return net, model, optimizer, sampler, loader


def all_reduce_async(net):
    """NCCL's shape of a wait, on CPU: the gradients' all-reduces (of grad / world: a sum is the
    mean) return at once; the caller's next sync line spins until they are done, as `loss.item()`
    does behind NCCL."""
    for p in net.parameters():
        p.grad /= dist.get_world_size()
    return [dist.all_reduce(p.grad, async_op=True) for p in net.parameters()]


def forward_backward(model, optimizer, x, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss


def mark_ready():
    """The harness's marker, written by rank 0 once its first step is done."""
    if dist.get_rank() == 0 and os.environ.get("HANGDOC_TEST_READY"):
        Path(os.environ["HANGDOC_TEST_READY"]).write_text("started")


def main():
    args = parse_args()
    out = Path(args.output_dir)

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net, model, optimizer, sampler, loader = build(args.nccl_shape, args.batch_size)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for step, (x, y) in enumerate(loader):
            forward_backward(model, optimizer, x, y)
            if args.nccl_shape:
                pending = all_reduce_async(net)
                while not all(w.is_completed() for w in pending): pass  # noqa: E701 (the sync spins on one line)
            optimizer.step()
            if epoch == 0 and step == 0:
                mark_ready()
        if rank == 0:
            torch.save({"epoch": epoch, "model": net.state_dict(),
                        "optimizer": optimizer.state_dict()}, out / "checkpoint.pt")
        dist.barrier()

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
