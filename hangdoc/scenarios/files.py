"""Many short clips, one WAV file each, read the way the PyTorch tutorials read files (field note 5).

    data.list (one .wav path a line) -> Dataset.__getitem__ opens one file -> wave -> features
    -> DataLoader(sampler=DistributedSampler, batch_size, num_workers) at its defaults: the
       workers are forked anew each epoch, two batches prefetched each
    -> DDP(nn.Linear) on gloo, 0.05 s of compute a step

The clips live on a network file system, where every open pays a metadata round trip before
the first byte (`--open-latency`, 25 ms by default: a busy NFS or Lustre server; a local disk's
page cache answers in microseconds, so the latency is added here, as the checkpoint scenario
adds its storage's bandwidth). Each worker opens its batch's 16 files one after the other, so
both ranks wait on their DataLoader most of every step: slow, data-bound, never a hang.

torchrun runs it; `--scenario tiny-files`, the markers in --workdir as in train.py.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
import wave
import zlib
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from audio import features, pcm_to_tensor   # the zoo's shard reading, beside this file
from train import CLASSES, Classifier, busy_for, finish   # the zoo's job, beside this file


def open_clip(path: str, latency: float):
    """Open a file on the network file system: a metadata round trip, then the file."""
    time.sleep(latency)
    return open(path, "rb")


class ClipFiles(Dataset):
    """One utterance per file; the label comes from the file name."""

    def __init__(self, paths: list[str], latency: float):
        self.paths, self.latency = paths, latency

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        path = self.paths[index]
        with open_clip(path, self.latency) as f, wave.open(f) as w:
            wav = pcm_to_tensor(w.readframes(w.getnframes()))
        return features(wav), zlib.crc32(Path(path).stem.encode()) % CLASSES


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="tiny-files")
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("--data-list", type=Path, default=None, help="one .wav path a line (default: WORKDIR/data.list)")
    p.add_argument("--max-steps", type=int, default=10**9)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--open-latency", type=float, default=0.025, help="seconds each open waits (0: a local disk)")
    p.add_argument("--compute", type=float, default=0.05, help="the model's compute a step, seconds")
    p.add_argument("--timeout", type=float, default=600.0, help="process-group timeout, seconds")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    paths = [line.strip() for line in open(args.data_list or args.workdir / "data.list") if line.strip()]
    dataset = ClipFiles(paths, args.open_latency)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.num_workers)
    model = DistributedDataParallel(Classifier())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    print(f"[rank {rank}] tiny-files: {len(paths)} files, {len(loader)} steps an epoch, "
          f"{args.num_workers} workers, pid {os.getpid()}", flush=True)
    started, step = time.monotonic(), 0
    for epoch in itertools.count():
        sampler.set_epoch(epoch)
        for feats, labels in loader:
            busy_for(args.compute)
            loss = F.cross_entropy(model(feats), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step == 1:
                (args.workdir / f"ready.{rank}").touch()
            if step % 10 == 0:
                print(f"[rank {rank}] epoch {epoch} step {step} loss {loss.item():.4f} "
                      f"t={time.monotonic() - started:.2f}s", flush=True)
            if step >= args.max_steps:
                break
        else:
            continue
        break
    finish(rank, step, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
