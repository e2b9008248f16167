"""A 2-rank gloo job for what a data pipeline may use: its CPUs, its threads, a native pool.

--mode gomp-fork  rank 1 runs an OpenMP parallel region (libgomp, loaded with ctypes) before its
                  DataLoader forks; its worker 0 runs one too after --fault-after s and waits
                  for ever for the pool threads the fork left behind
--mode tokenizers-fork  rank 1 tokenizes a batch in parallel (Hugging Face tokenizers, its rayon
                  pool; run it with TOKENIZERS_PARALLELISM=true) before its DataLoader forks; its worker 0
                  tokenizes after --fault-after s and waits for ever for the pool's threads
--mode pinned     every worker calls os.sched_setaffinity(0, {first CPU}) in worker_init_fn, as
                  conda's llvm-openmp 16 does to a forked worker: the workers share one CPU and
                  every rank waits on its data
--mode plain      the same CPU-heavy loading with the workers' CPUs left alone
--mode big-batches  after --fault-after s the workers hand over --sample-mb per sample through
                  /dev/shm (start the job with a small /dev/shm of its own to see them fail)
--mode compute    each step multiplies matrices on torch's intra-op threads (as many as the job's
                  OMP_NUM_THREADS says: run it with OMP_NUM_THREADS=8 to oversubscribe the cores)
Rank r writes WORKDIR/ready.r after its first step; the faulting process writes WORKDIR/fault.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

RANK = int(os.environ.get("RANK", "0"))
_REGION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _body(_):
    pass


BODY = _REGION(_body)


def openmp() -> ctypes.CDLL:
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libgomp.so.1"))
    lib.GOMP_parallel.argtypes = [_REGION, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    return lib


def parallel_region(lib: ctypes.CDLL) -> None:
    lib.GOMP_parallel(BODY, None, 4, 0)


class Samples(Dataset):
    def __init__(self, args, lib):
        self.args, self.lib, self.started = args, lib, time.monotonic()

    def __len__(self):
        return 1 << 30

    def __getitem__(self, index):
        late = time.monotonic() - self.started > self.args.fault_after
        if self.args.mode in ("gomp-fork", "tokenizers-fork") and RANK == 1 and late \
                and torch.utils.data.get_worker_info().id == 0:
            path = Path(self.args.workdir, "fault")
            if not path.exists():
                path.write_text(f"{time.time()} rank {RANK} pid {os.getpid()}: {self.args.mode}\n")
            if self.args.mode == "gomp-fork":
                parallel_region(self.lib)    # never returns
            self.lib.encode_batch(TEXTS)     # never returns
        if self.args.mode in ("pinned", "plain"):
            end = time.process_time() + self.args.work_s   # CPU-heavy augmentation
            while time.process_time() < end:
                pass
        if self.args.mode == "big-batches" and late:
            return torch.ones(int(self.args.sample_mb * (1 << 20)) // 4)
        return torch.ones(16)


def tokenizer():
    """A small BPE tokenizer trained in memory (nothing to download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog " * 20] * 100,
                            trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
    return tok


TEXTS = ["the quick brown fox jumps over the lazy dog"] * 2000


def pin_to_first_cpu(worker_id: int) -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workdir", required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--fault-after", type=float, default=4.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--work-s", type=float, default=0.05)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--sample-mb", type=float, default=4.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    lib = None
    if args.mode == "gomp-fork" and rank == 1:
        lib = openmp()
        parallel_region(lib)                 # the pool's threads exist in this process only
    if args.mode == "tokenizers-fork" and rank == 1:
        lib = tokenizer()
        lib.encode_batch(TEXTS)              # the rayon pool starts here, in this process only
    init = pin_to_first_cpu if args.mode == "pinned" else None
    loader = DataLoader(Samples(args, lib), batch_size=4, num_workers=args.workers, worker_init_fn=init)
    total = torch.zeros(1)
    weights = torch.rand(384, 384)
    for step, batch in enumerate(loader):
        if args.mode == "compute":
            for _ in range(20):
                weights = torch.tanh(weights @ weights)
        total += batch.sum()
        dist.all_reduce(total)
        if step == 0:
            Path(args.workdir, f"ready.{rank}").write_text(str(os.getpid()))
        if args.max_steps and step + 1 >= args.max_steps:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
