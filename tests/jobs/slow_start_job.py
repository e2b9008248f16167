"""One rank (RANK=0, WORLD_SIZE=1 in its environment) whose DataLoader workers are slow to start:
each forked worker sleeps --start-s seconds before it runs, as on a busy node where a big
process's copy-on-write faults and a loaded CPU hold a new worker for a while. Until then the
worker's stack is its rank's copy (`Popen._launch` under `DataLoader.__iter__`).
Each worker writes WORKDIR/forked.PID as it starts to sleep; the rank then steps for ever."""
import argparse
import os
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--start-s", type=float, default=6.0)
    args = parser.parse_args()

    def slow_start() -> None:
        (args.workdir / f"forked.{os.getpid()}").touch()
        time.sleep(args.start_s)

    os.register_at_fork(after_in_child=slow_start)
    loader = DataLoader(TensorDataset(torch.randn(1 << 20, 4)), batch_size=4, num_workers=2)
    for _ in loader:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
