"""Plain DDP on CPU started from the script itself, as older recipes and research code do:

    python spawn_ddp.py --output-dir DIR [--start spawn|process] [--init tcp|file|env]

--start spawn    torch.multiprocessing.spawn(main, args=(world, ...), nprocs=world)
--start process  one multiprocessing.Process(target=main, args=(rank, world, ...)) per rank
--init           init_process_group's init_method: tcp://127.0.0.1:PORT, file://DIR/rendezvous, or
                 env:// with MASTER_ADDR / MASTER_PORT set before the ranks start and RANK /
                 WORLD_SIZE set by each rank in its own os.environ (never in its /proc environ)

No environment names a rank. A map-style dataset, DistributedSampler + set_epoch, a
DataLoader(num_workers=2, persistent_workers=True), SGD, a checkpoint per epoch on rank 0. Prints nothing.
"""
import argparse
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from plain_ddp import Regression    # the same data as plain_ddp.py, beside this script


def main(rank, world_size, init, out, epochs):
    torch.set_num_threads(1)
    if init.startswith("env://"):
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world_size)
        dist.init_process_group("gloo", init_method=init)
    else:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dataset = Regression(8192)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    # The ranks were spawned, so are their workers (the spawn start method is inherited): kept for
    # the whole run, as spawn recipes do, or each epoch would start two interpreters per rank.
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=2, persistent_workers=True)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            if epoch == 0 and step == 0 and rank == 0 and os.environ.get("HANGDOC_TEST_READY"):
                Path(os.environ["HANGDOC_TEST_READY"]).write_text("started")
        if rank == 0:
            torch.save({"epoch": epoch, "model": model.module.state_dict()}, Path(out) / "checkpoint.pt")
        dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default=".")
    parser.add_argument("--start", choices=("spawn", "process"), default="spawn")
    parser.add_argument("--init", choices=("tcp", "file", "env"), default="tcp")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()
    out = os.path.abspath(args.output_dir)
    if args.init == "tcp":
        init = f"tcp://127.0.0.1:{free_port()}"
    elif args.init == "file":
        init = f"file://{out}/rendezvous"
    else:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        init = "env://"
    if args.start == "spawn":
        mp.spawn(main, args=(args.nproc, init, out, args.epochs), nprocs=args.nproc)
    else:
        ranks = [mp.Process(target=main, args=(rank, args.nproc, init, out, args.epochs))
                 for rank in range(args.nproc)]
        for p in ranks:
            p.start()
        for p in ranks:
            p.join()
        sys.exit(max(abs(p.exitcode or 0) for p in ranks))
