"""One rank on NCCL, parked after its first all_reduce: what a process with an NCCL process group
looks like from outside (its threads' names, its libraries) on a machine with one GPU.

    torchrun --nproc_per_node=1 nccl_one_rank.py READY_FILE
"""
from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    t = torch.ones(1024, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    with open(sys.argv[1], "w") as f:
        f.write(f"all_reduce {t[0].item():.0f}\n")
    time.sleep(600)


if __name__ == "__main__":
    main()
