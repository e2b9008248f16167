"""A small real torchrun job for the collector tests.

Each rank runs a gloo all_reduce per step on batches from a DataLoader with 2 forked
workers; every worker keeps a data file open and reads through it, so its read
position grows. Rank r writes WORKDIR/ready.r after its first step. With
--exit-worker, rank 1's worker 1 exits when WORKDIR/exit-worker appears.
"""
import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class FileReader(IterableDataset):
    def __init__(self, path, workdir, exit_worker):
        self.path, self.workdir, self.exit_worker = path, workdir, exit_worker

    def __iter__(self):
        info = get_worker_info()
        rank = int(os.environ["RANK"])
        with open(self.path, "rb") as f:
            while True:
                if not f.read(1 << 16):
                    f.seek(0)
                if (self.exit_worker and rank == 1 and info.id == 1
                        and (Path(self.workdir) / "exit-worker").exists()):
                    os._exit(0)
                time.sleep(0.02)
                yield torch.ones(4)


def train_loop(args):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = DataLoader(FileReader(args.data, args.workdir, args.exit_worker), batch_size=1,
                        num_workers=2)
    total = torch.zeros(1)
    for step, batch in enumerate(loader):
        dist.all_reduce(total)
        if step == 0:
            Path(args.workdir, f"ready.{rank}").write_text(str(os.getpid()))
        time.sleep(0.01)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--exit-worker", action="store_true")
    parser.add_argument("--hf-token", default="")
    train_loop(parser.parse_args())
