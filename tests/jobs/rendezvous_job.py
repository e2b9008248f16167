"""A gloo job whose rank 1 never reaches init_process_group: it waits for a stale lock file.

Rank 1 first takes a lock on a shared file (as a dataset cache or a download helper does) in a
library-style retry loop that counts its attempts and sleeps between them; the lock file, left
by "an earlier run", never goes away. The other ranks call init_process_group and wait there
for rank 1, which never comes. Rank r writes WORKDIR/ready.r just before it starts waiting.
"""
import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def acquire_lock(path: str, poll_s: float = 0.2) -> int:
    """Create `path` exclusively, retrying until it can (no timeout: the bug)."""
    attempts = 0
    while True:
        try:
            return os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            attempts += 1
            time.sleep(poll_s)


def main(args):
    rank = int(os.environ["RANK"])
    lock = Path(args.workdir, "cache.lock")
    if rank == 1:
        lock.write_text("held by an earlier run")   # stale: nobody will remove it
        Path(args.workdir, f"ready.{rank}").write_text(str(os.getpid()))
        fd = acquire_lock(str(lock))
        os.close(fd)
    else:
        Path(args.workdir, f"ready.{rank}").write_text(str(os.getpid()))
    dist.init_process_group("gloo")
    total = torch.zeros(1)
    for _ in range(3):
        dist.all_reduce(total)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    main(parser.parse_args())
