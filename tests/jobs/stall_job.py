"""A 2-rank gloo job that stalls in one chosen way, for the watchdog tests.

--mode bz2       rank 1's workers decompress bz2 forever; rank 0 waits in all_reduce
--mode compute   rank 1 loops in its own compute; rank 0 waits in all_reduce
--mode mismatch  rank 1 goes to a barrier while rank 0 is in all_reduce
--mode slow      every step takes 2-3 s (never a hang)
--mode segfault  a rank-1 worker dies by SIGSEGV
--mode frozen    both ranks take a lock twice after a few steps: frozen outside any collective
Rank r writes WORKDIR/ready.r after its first step; the stalling rank writes WORKDIR/fault.
"""
import argparse
import bz2
import os
import signal
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

BLOB = bz2.compress(os.urandom(1 << 20))


class Batches(IterableDataset):
    def __init__(self, mode, workdir, gate=None):
        self.mode, self.workdir, self.gate = mode, workdir, gate

    def __iter__(self):
        rank = int(os.environ["RANK"])
        info = get_worker_info()
        step = 0
        while True:
            step += 1
            if rank == 1 and step > 3 and self.mode == "bz2":
                Path(self.workdir, "fault").write_text(str(time.time()))
                while True:
                    bz2.decompress(BLOB)
            if (rank == 1 and step > 3 and self.mode == "segfault" and info.id == 0
                    and (not self.gate or Path(self.gate).exists())):
                Path(self.workdir, "fault").write_text(str(time.time()))
                os.kill(os.getpid(), signal.SIGSEGV)
            yield torch.ones(4)


def heavy_compute():
    x = torch.ones(64, 64)
    while True:
        x = (x @ x).clamp(-1, 1)


def train_loop(args):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.zeros(1)
    loader = DataLoader(Batches(args.mode, args.workdir, args.gate), batch_size=1, num_workers=2)
    for step, batch in enumerate(loader):
        if step == 5 and rank == 1 and args.mode == "compute":
            Path(args.workdir, "fault").write_text(str(time.time()))
            heavy_compute()
        if step == 5 and rank == 1 and args.mode == "mismatch":
            Path(args.workdir, "fault").write_text(str(time.time()))
            dist.barrier()
        if step == 5 and args.mode == "frozen":
            lock = threading.Lock()
            lock.acquire()
            Path(args.workdir, "fault").write_text(str(time.time()))
            lock.acquire()      # never returns: the same thread holds it
        if args.mode == "slow":
            time.sleep(2.0 + 0.5 * rank)
        dist.all_reduce(total)
        if step == 0:
            Path(args.workdir, f"ready.{rank}").write_text(str(os.getpid()))
        if args.max_steps and step + 1 >= args.max_steps:
            break
        time.sleep(0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--max-steps", type=int, default=0)
    parser.add_argument("--gate", default=None, help="segfault: only once this file exists")
    train_loop(parser.parse_args())
