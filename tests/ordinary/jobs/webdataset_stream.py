"""Image classification streamed from WebDataset tar shards, two workers per rank.

    torchrun --nproc_per_node=2 webdataset_stream.py --output-dir DIR

Rank 0 writes the shards (tar files of raw 16x16 RGB ".jpg" bytes and a ".cls" label) under
DIR/shards with the standard library. Shards split by node, then by worker; every epoch is a
fixed number of steps, so no rank runs out before the others.
"""
import argparse
import io
import os
import random
import tarfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
import webdataset as wds
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

SIDE, CLASSES = 16, 10


def write_shards(folder, shards=8, per_shard=256):
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for s in range(shards):
        with tarfile.open(folder / f"train-{s:04d}.tar", "w") as tar:
            for i in range(per_shard):
                label = rng.randrange(CLASSES)
                pixels = bytes((label * 25 + rng.randrange(40)) % 256 for _ in range(SIDE * SIDE * 3))
                for ext, payload in (("jpg", pixels), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"sample{s:04d}{i:05d}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
    return sorted(str(p) for p in folder.glob("train-*.tar"))


def to_tensors(sample):
    pixels, label = sample
    image = torch.frombuffer(bytearray(pixels), dtype=torch.uint8).float().div(255).view(3, SIDE, SIDE)
    return image, label


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR", "."))
    parser.add_argument("--epochs", type=int, default=18)
    parser.add_argument("--steps-per-epoch", type=int, default=56)
    args = parser.parse_args()
    out = Path(args.output_dir)

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        write_shards(out / "shards")
    dist.barrier()
    urls = sorted(str(p) for p in (out / "shards").glob("train-*.tar"))

    dataset = (wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node)
               .decode().to_tuple("jpg", "cls").map(to_tensors))
    loader = DataLoader(dataset, batch_size=16, num_workers=2)
    model = DDP(nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(512, CLASSES)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    for epoch in range(args.epochs):
        for step, (images, labels) in enumerate(loader):
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if epoch == 0 and step == 0 and rank == 0 and os.environ.get("HANGDOC_TEST_READY"):
                Path(os.environ["HANGDOC_TEST_READY"]).write_text("started")
            if step + 1 == args.steps_per_epoch:
                break
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.3f}", flush=True)
            torch.save(model.module.state_dict(), out / "model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
