"""A small WeNet-shaped training job; `--scenario NAME` picks the fault it reproduces.

    shard list -> shards[rank::world][worker::workers] -> tarfile -> wave -> features
    -> batches -> DDP(nn.Linear) on gloo -> backward (gradient all_reduce) -> SGD step

torchrun runs it (`python -m hangdoc.scenarios NAME --workdir DIR` builds the command).
It imports nothing but the standard library, torch and `audio.py` beside it (how a shard is
read and decoded), so the stacks a watcher samples hold the zoo's frames and PyTorch's.
Markers it leaves in --workdir:
  ready.<rank>  once the rank's first step has completed;
  fault         JSON {"time", "rank", "pid", "what"}, written by the process that causes the
                fault, when it begins (first writer wins).
"""
from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import os
import sys
import threading
import time
import zlib
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from audio import (FEATURES, features, read_checked, read_from_member_files, read_sequential,   # beside this file
                   read_shuffled)

CLASSES = 8
RANK = int(os.environ.get("RANK", "0"))
WORKDIR = Path(".")


def mark_fault(what: str) -> None:
    """Leave the `fault` marker (once per job) at the moment this process starts the fault."""
    record = {"time": time.time(), "rank": RANK, "pid": os.getpid(), "what": what}
    path = WORKDIR / "fault"
    tmp = WORKDIR / f".fault.{os.getpid()}"
    tmp.write_text(json.dumps(record) + "\n")
    try:
        os.link(tmp, path)      # atomic, and never overwrites an earlier fault
    except FileExistsError:
        return
    finally:
        tmp.unlink()
    print(f"[rank {RANK}] fault: {what}", flush=True)


def worker_id() -> int:
    info = get_worker_info()
    return info.id if info else -1


# --- dataset, model ----------------------------------------------------------------------


def label(text: str) -> int:
    return zlib.crc32(text.encode()) % CLASSES


def collate(samples):
    feats, labels = zip(*samples)
    return torch.stack(feats), torch.tensor(labels)


class ShardDataset(IterableDataset):
    """shards[rank::world_size][worker_id::num_workers], one sample per utterance."""

    def __init__(self, shards: list[str], rank: int, world: int, behaviour: "Healthy"):
        self.shards, self.rank, self.world, self.behaviour = shards, rank, world, behaviour

    def __iter__(self):
        info = get_worker_info()
        wid, nworkers = (info.id, info.num_workers) if info else (0, 1)
        count = 0
        mine = self.shards[self.rank::self.world][wid::nworkers]
        for _ in itertools.count() if self.behaviour.resampled else range(1):
            for shard in mine:
                for sample in self.behaviour.read_shard(shard):
                    count += 1
                    self.behaviour.on_sample(count)
                    yield features(self.behaviour.transform(sample["wav"])), label(sample["txt"])


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        return self.linear(x)


# --- the scenarios ----------------------------------------------------------------------


class Healthy:
    """Fast steps; the baseline every other scenario changes in one place."""

    pace_s = 0.0     # model compute per step: data faults start after a visible healthy rhythm
    resampled = False    # True: each worker loops over its shards (an endless stream, as
                         # webdataset's `resampled=True`): no epoch end, --max-steps ends the job

    def __init__(self, args):
        self.args = args

    def read_shard(self, path: str):
        return read_sequential(path)

    def on_sample(self, count: int) -> None:        # in the DataLoader worker
        pass

    def transform(self, wav: torch.Tensor) -> torch.Tensor:     # in the DataLoader worker
        return wav

    def model(self) -> nn.Module:
        return Classifier()

    def before_training(self) -> None:
        pass

    def before_step(self, step: int) -> None:
        pass

    def after_step(self, step: int, model: nn.Module) -> None:
        pass

    def end_of_epoch(self, epoch: int, step: int) -> None:
        pass


class Bz2Shards(Healthy):
    """Local shuffle by random access: on a .tar.bz2 every backward seek restarts bz2."""

    pace_s = 0.3

    def read_shard(self, path):
        if path.endswith(".bz2"):
            mark_fault(f"worker {worker_id()} of rank {RANK} started {Path(path).name}: "
                       "shuffled random access into a bz2 tar")
        return read_shuffled(path, seed=zlib.crc32(path.encode()))


class Bz2Straggler(Healthy):
    """Rank 1 draws the .tar.bz2 shards and reads them in order, as they should be read: no seek,
    no restart, only bz2's tens of MB/s on its workers. Each rank's stream is endless, so nothing
    stalls: every step lasts as long as rank 1's workers take to decompress a batch."""

    pace_s = 0.1
    resampled = True


class Bz2Rewind(Healthy):
    """Every utterance checked against an index of CRCs made before the corpus was re-encoded:
    one utterance of a .tar.bz2 shard never matches, and its worker reads it
    again for ever, each retry a backward seek (bz2 decompresses from the file's start to it)."""

    pace_s = 0.3

    def read_shard(self, path):
        if not path.endswith(".bz2"):
            return read_sequential(path)
        stale = {f"{Path(path).name.split('.')[0]}_utt00120": 0}    # its CRC before the re-encode

        def retried(key):
            mark_fault(f"worker {worker_id()} of rank {RANK} reads {key} of {Path(path).name} again: "
                       "its CRC is not the index's")
        return read_checked(path, stale, on_retry=retried)


class TarStreamDecode(Healthy):
    """Audio decoded from tar member file objects; per-channel files of a bz2 shard."""

    pace_s = 0.1

    def read_shard(self, path):
        if path.endswith(".bz2"):
            mark_fault(f"worker {worker_id()} of rank {RANK} started {Path(path).name}: "
                       "decoding channels straight from compressed tar members")
        return read_from_member_files(path)


class UnevenShards(Healthy):
    """Nothing changes here: the shard list gives rank 1 fewer batches than rank 0."""

    pace_s = 0.15

    def end_of_epoch(self, epoch, step):
        mark_fault(f"rank {RANK} ran out of batches after step {step} (epoch {epoch}) and "
                   "entered the end-of-epoch barrier")


class WorkerSegfault(Healthy):
    """A rank-1 worker dies in native code (a null pointer read) after a few batches."""

    def on_sample(self, count):
        if RANK == 1 and worker_id() == 0 and count == 3 * self.args.batch_size + 1:
            mark_fault(f"worker 0 of rank 1 (pid {os.getpid()}) reads address 0")
            ctypes.string_at(0)


STATS_LOCK = threading.Lock()
STATS = {"samples": 0}


def upload_stats_forever(path: Path, started: threading.Event) -> None:
    """A metrics uploader that holds the lock across its slow write: fine in one process."""
    while True:
        with STATS_LOCK:
            started.set()
            path.write_text(json.dumps(STATS))
            time.sleep(0.5)


def report_stats(samples: int) -> None:
    if STATS_LOCK.locked():
        mark_fault(f"worker {worker_id()} of rank {RANK} takes a lock that was held when it was forked")
    with STATS_LOCK:
        STATS["samples"] += samples


class WorkerDeadlock(Healthy):
    """Rank 1 runs a metrics thread; its workers fork while it holds a lock they then take."""

    pace_s = 0.2

    def before_training(self):
        if RANK == 1:
            started = threading.Event()
            threading.Thread(target=upload_stats_forever, args=(WORKDIR / "stats.json", started),
                             name="stats-uploader", daemon=True).start()
            started.wait()

    def on_sample(self, count):
        if count % 48 == 0:
            report_stats(48)


def heavy_compute() -> torch.Tensor:
    """A per-rank evaluation that never reaches its stopping criterion."""
    x = torch.randn(192, 192)
    while True:
        x = torch.tanh(x @ x.T / 14.0)
        if x.abs().max() > 10.0:         # tanh keeps it below 1: never true
            return x


class ComputeStraggler(Healthy):
    pace_s = 0.2

    def before_step(self, step):
        if RANK == 1 and step == 25:
            mark_fault("rank 1 entered heavy_compute() before step 26")
            heavy_compute()


def dump_flight_recorder() -> None:
    """What NCCL's watchdog does on a timeout: this rank's Flight Recorder to TORCH_FR_DUMP_TEMP_FILE<rank>."""
    import torch._C._distributed_c10d as c10d

    path = f"{os.environ['TORCH_FR_DUMP_TEMP_FILE']}{RANK}"     # the scenario sets it (Scenario.env)
    with open(path + ".tmp", "wb") as f:
        f.write(c10d._dump_fr_trace())
    os.replace(path + ".tmp", path)
    print(f"[rank {RANK}] Flight Recorder dumped to {path}", flush=True)


class FrStraggler(ComputeStraggler):
    """compute-straggler whose ranks dump their Flight Recorder 1 s after the fault begins (gloo has
    no dump on timeout or dump pipe: a thread stands in for NCCL's watchdog)."""

    def before_training(self):
        threading.Thread(target=self.dump_after_fault, name="fr-dump", daemon=True).start()

    def dump_after_fault(self):
        while not (WORKDIR / "fault").exists():
            time.sleep(0.2)
        time.sleep(1.0)              # by now rank 0 has entered the gradient all_reduce
        dump_flight_recorder()


def busy_for(seconds: float, size: int = 128) -> None:
    """Real CPU work (matmuls) for a fixed wall time, so cadence does not depend on the machine."""
    x = torch.randn(size, size)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        x = torch.tanh(x @ x / size)


class SlowData(Healthy):
    """One worker per rank and a CPU-heavy augmentation: ranks mostly wait for data, yet move."""

    def transform(self, wav):
        busy_for(0.15)               # "reverb simulation"
        return wav


class SlowModel(Classifier):
    def forward(self, x):
        busy_for(2.5)
        return self.linear(x)


class SlowSteps(Healthy):
    def model(self):
        return SlowModel()


class NetworkFile:
    """A file on shared network storage: writes drain at `rate` bytes per second."""

    def __init__(self, f, rate: float):
        self.f, self.rate = f, rate

    def write(self, data) -> int:
        n = self.f.write(data)
        time.sleep(n / self.rate)
        return n

    def flush(self) -> None:
        self.f.flush()


def save_checkpoint(model: nn.Module, path: Path) -> None:
    """Save the model plus an optimizer-sized tensor (32 MB) to ~10 MB/s storage, then fsync."""
    state = {"model": model.state_dict(), "ema": torch.zeros(8 * 1024 * 1024)}
    with open(path, "wb") as f:
        torch.save(state, NetworkFile(f, rate=10e6))
        f.flush()
        os.fsync(f.fileno())


class CheckpointPause(Healthy):
    """Every 10 steps rank 0 writes a checkpoint for ~3.5 s; rank 1 waits in a barrier."""

    def after_step(self, step, model):
        if step % 10 == 0:
            if RANK == 0:
                save_checkpoint(model.module, WORKDIR / "checkpoint.pt")
            dist.barrier()


BEHAVIOURS = {
    "healthy": Healthy,
    "bz2-shards": Bz2Shards,
    "bz2-straggler": Bz2Straggler,
    "bz2-rewind": Bz2Rewind,
    "tar-stream-decode": TarStreamDecode,
    "uneven-shards": UnevenShards,
    "worker-segfault": WorkerSegfault,
    "worker-deadlock": WorkerDeadlock,
    "compute-straggler": ComputeStraggler,
    "fr-straggler": FrStraggler,
    "slow-data": SlowData,
    "slow-steps": SlowSteps,
    "checkpoint-pause": CheckpointPause,
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True, choices=sorted(BEHAVIOURS))
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("--data-list", type=Path, default=None, help="shard list (default: WORKDIR/data.list)")
    p.add_argument("--max-steps", type=int, default=10**9)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--timeout", type=float, default=600.0, help="process-group timeout, seconds")
    return p.parse_args(argv)


def main(argv=None) -> int:
    global WORKDIR
    args = parse_args(argv)
    WORKDIR = args.workdir
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    behaviour = BEHAVIOURS[args.scenario](args)
    shards = [line.strip() for line in open(args.data_list or WORKDIR / "data.list") if line.strip()]
    loader = DataLoader(ShardDataset(shards, rank, world, behaviour), batch_size=args.batch_size,
                        num_workers=args.num_workers, collate_fn=collate,
                        persistent_workers=args.num_workers > 0)
    model = DistributedDataParallel(behaviour.model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    behaviour.before_training()
    print(f"[rank {rank}] {args.scenario}: {len(shards)} shards, world {world}, "
          f"{args.num_workers} workers, pid {os.getpid()}", flush=True)

    started = time.monotonic()
    step = 0
    for epoch in itertools.count():
        for feats, labels in loader:
            behaviour.before_step(step)
            if behaviour.pace_s:
                busy_for(behaviour.pace_s)
            loss = F.cross_entropy(model(feats), labels)
            optimizer.zero_grad()
            loss.backward()                      # DDP all_reduces the gradients here
            optimizer.step()
            step += 1
            if step == 1:
                (WORKDIR / f"ready.{rank}").touch()
            if step % args.log_every == 0:
                print(f"[rank {rank}] step {step} loss {loss.item():.4f} "
                      f"t={time.monotonic() - started:.2f}s", flush=True)
            behaviour.after_step(step, model)
            if step >= args.max_steps:
                break
        else:
            behaviour.end_of_epoch(epoch, step)
            dist.barrier()                       # end-of-epoch sync, as before validation
            continue
        break
    finish(rank, step, started)
    return 0


def finish(rank: int, step: int, started: float) -> None:
    """End the job together: a last barrier, the process group down, and the line the zoo reads."""
    dist.barrier()
    dist.destroy_process_group()
    print(f"[rank {rank}] done after {step} steps ({time.monotonic() - started:.1f} s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
