"""A 2-rank gloo job for the root-cause rules' golden bundles: the faults the scenario zoo lacks.

Reads the WeNet-style shard list named by --data-list (shards[rank::world][worker::workers],
tar members key.wav + key.txt) and trains a DDP linear model on gloo, one rank per process.

--mode bz2-bystander  rank 0 reads .tar.bz2 shards (fast enough); rank 1 loops in
                      heavy_compute() at step 5: bz2 on a rank that is not the culprit
--mode worker-oom     a rank-1 worker is SIGKILLed (as the OOM killer does) --fault-after s in
--mode worker-keyerror  a rank-1 worker meets a raw-list entry; decode() sets sample_rate only
                      for tar bytes, so resample() raises KeyError: 'sample_rate'
--mode tar-stream     a rank-1 worker opens its shard as a stream (mode "r|*") and hands the
                      member file object to a decoder that asks seekable(): AttributeError
--mode stuck-fetch    a rank-1 worker fetches from a store that accepted the connection but
                      never answers: it sleeps in recv() forever, its rank waits for data
--mode stuck-open     a rank-1 worker opens a shard on a dead mount: a FIFO with no writer
                      (WORKDIR/mnt/shard-dead.tar), so open() blocks in the kernel for ever
Rank r writes WORKDIR/ready.r after its first step; the faulting process writes WORKDIR/fault.
"""
from __future__ import annotations

import argparse
import io
import os
import signal
import socket
import tarfile
import time
import wave
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

RANK = int(os.environ.get("RANK", "0"))
FEATURES = 16


def mark_fault(workdir: Path, what: str) -> None:
    path = workdir / "fault"
    if not path.exists():
        path.write_text(f"{time.time()} rank {RANK} pid {os.getpid()}: {what}\n")
    print(f"[rank {RANK}] fault: {what}", flush=True)


def decode(sample: dict) -> dict:
    """Bytes from a tar member, or a path from a raw list: the bug of FIELD-NOTES 1."""
    if "wav_bytes" in sample:
        with wave.open(io.BytesIO(sample.pop("wav_bytes"))) as w:
            sample["wav"] = torch.frombuffer(bytearray(w.readframes(w.getnframes())), dtype=torch.int16)
            sample["sample_rate"] = w.getframerate()
    else:
        with wave.open(sample["path"]) as w:
            sample["wav"] = torch.frombuffer(bytearray(w.readframes(w.getnframes())), dtype=torch.int16)
    return sample


def resample(sample: dict, target: int = 16000) -> dict:
    if sample["sample_rate"] != target:
        step = sample["sample_rate"] / target
        sample["wav"] = sample["wav"][(torch.arange(int(len(sample["wav"]) / step)) * step).long()]
    return sample


def load_audio(fileobj) -> torch.Tensor:
    """A decoder that, like soundfile and torchaudio, needs a seekable file object."""
    if not fileobj.seekable():
        raise ValueError("decoder needs a seekable file")
    with wave.open(fileobj) as w:
        return torch.frombuffer(bytearray(w.readframes(w.getnframes())), dtype=torch.int16)


def read_tar(path: str):
    with tarfile.open(path, "r:*") as tar:
        for member in tar:
            key, _, ext = member.name.partition(".")
            if ext == "wav":
                yield {"key": key, "wav_bytes": tar.extractfile(member).read()}


def read_tar_stream(path: str):
    with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r|*") as tar:
        for member in tar:
            if member.name.endswith(".wav"):
                yield {"key": member.name, "wav": load_audio(tar.extractfile(member)), "sample_rate": 16000}


def load(path: str) -> bytes:
    """Read a whole shard from the mounted file system."""
    with open(path, "rb") as f:
        return f.read()


def fetch_remote(port: int) -> bytes:
    """Fetch a shard from the object store over HTTP."""
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(b"GET /shards/next HTTP/1.0\r\n\r\n")
    return conn.recv(1 << 16)


class Shards(IterableDataset):
    def __init__(self, shards: list[str], args, store_port: int | None):
        self.shards, self.args, self.store_port = shards, args, store_port

    def samples(self, wid: int, nworkers: int, started: float):
        mine = self.shards[RANK::int(os.environ["WORLD_SIZE"])][wid::nworkers] if self.shards else []
        mode, late = self.args.mode, time.monotonic() - started > self.args.fault_after
        faulty = RANK == 1 and wid == 0 and late
        if faulty and mode == "worker-keyerror":
            mark_fault(self.args.workdir, "worker 0 of rank 1 reads a raw-list entry")
            yield decode({"key": "raw", "path": str(self.args.workdir / "raw.wav")})
        if faulty and mode == "tar-stream":
            mark_fault(self.args.workdir, "worker 0 of rank 1 decodes from a streamed tar member")
            yield from read_tar_stream(mine[0])
        if faulty and mode == "stuck-fetch":
            mark_fault(self.args.workdir, "worker 0 of rank 1 fetches from the object store")
            fetch_remote(self.store_port)
        if faulty and mode == "stuck-open":
            dead = self.args.workdir / "mnt" / "shard-dead.tar"
            mark_fault(self.args.workdir, f"worker 0 of rank 1 opens {dead}")
            load(str(dead))
        if faulty and mode == "worker-oom":
            mark_fault(self.args.workdir, f"worker 0 of rank 1 (pid {os.getpid()}) is SIGKILLed")
            os.kill(os.getpid(), signal.SIGKILL)
        for shard in mine:
            for sample in read_tar(shard):
                yield decode(sample)

    def __iter__(self):
        info = get_worker_info()
        wid, nworkers = (info.id, info.num_workers) if info else (0, 1)
        started = time.monotonic()
        while True:   # epochs without end: a hang or a crash ends the job
            for sample in self.samples(wid, nworkers, started):
                wav = resample(sample)["wav"].float()[: FEATURES * 100]
                yield torch.nn.functional.pad(wav, (0, FEATURES * 100 - len(wav))).reshape(FEATURES, 100).mean(1)


def heavy_compute() -> torch.Tensor:
    x = torch.randn(192, 192)
    while True:
        x = torch.tanh(x @ x.T / 14.0)
        if x.abs().max() > 10.0:
            return x


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("--mode", required=True)
    p.add_argument("--data-list", required=True)
    p.add_argument("--fault-after", type=float, default=6.0)
    p.add_argument("--num-workers", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    store = None
    if args.mode == "stuck-fetch":
        store = socket.socket()            # accepts connections (backlog) but never answers
        store.bind(("127.0.0.1", 0))
        store.listen(8)
    if args.mode == "stuck-open" and rank == 1:
        (args.workdir / "mnt").mkdir(exist_ok=True)
        os.mkfifo(args.workdir / "mnt" / "shard-dead.tar")
    shards = [line.strip() for line in open(args.data_list) if line.strip()]
    dataset = Shards(shards, args, store.getsockname()[1] if store else None)
    loader = DataLoader(dataset, batch_size=4, num_workers=args.num_workers)
    model = DistributedDataParallel(nn.Linear(FEATURES, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, batch in enumerate(loader):
        if args.mode == "bz2-bystander" and rank == 1 and step == 5:
            mark_fault(args.workdir, "rank 1 entered heavy_compute() before step 6")
            heavy_compute()
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 0:
            (args.workdir / f"ready.{rank}").touch()
        time.sleep(0.02)


if __name__ == "__main__":
    main()
