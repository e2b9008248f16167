"""Record Flight Recorder dumps from a real 2-rank gloo job (tests/flight_recorder/README.md).

    TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=DIR/fr_trace_rank_ \
        torchrun --standalone --nproc_per_node=2 tests/jobs/fr_job.py MODE DIR

Six collectives on the default group (3 all_reduce, broadcast, all_gather, barrier), then:
  healthy    one all_reduce on a new group, dump, exit;
  straggler  rank 0 enters all_reduce #7, rank 1 sleeps and never issues it;
  mismatch   rank 0 enters all_reduce #7 (float32 [4]), rank 1 broadcast #7 (float64 [8]).
Each rank writes its dump twice, the pickle (`_dump_fr_trace`, with Python frames) to
<prefix><rank> and the JSON (`_dump_fr_trace_json`) to <prefix><rank>.json: from the main
thread when healthy, else from a timer thread 3 s into the hang.
"""
import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch._C._distributed_c10d as c10d
import torch.distributed as dist


def dump(prefix: str, rank: int, out: str) -> None:
    with open(f"{prefix}{rank}", "wb") as f:
        f.write(c10d._dump_fr_trace())
    with open(f"{prefix}{rank}.json", "wb") as f:
        f.write(c10d._dump_fr_trace_json())
    open(os.path.join(out, f"dumped.{rank}"), "w").close()


def train_step() -> None:
    dist.all_reduce(torch.ones(4))


def main() -> int:
    mode, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    prefix = os.environ["TORCH_FR_DUMP_TEMP_FILE"]
    for _ in range(3):
        train_step()
    dist.broadcast(torch.zeros(3), src=0)
    dist.all_gather([torch.zeros(2) for _ in range(2)], torch.ones(2))
    dist.barrier()
    if mode == "healthy":
        group = dist.new_group([0, 1])
        dist.all_reduce(torch.ones(5, dtype=torch.int64), group=group)
        dump(prefix, rank, out)
        dist.barrier()
        return 0
    threading.Timer(3.0, dump, (prefix, rank, out)).start()
    if mode == "straggler":
        if rank == 1:
            time.sleep(120)
        train_step()
    elif mode == "mismatch":
        if rank == 1:
            dist.broadcast(torch.zeros(8, dtype=torch.float64), src=0)
        else:
            train_step()
    time.sleep(120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
