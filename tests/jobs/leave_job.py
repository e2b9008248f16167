"""A gloo job whose ending starts with one rank leaving, for the tests of the order of departure.

--mode skip        (pytorch/pytorch#138322) --steps all_reduce steps, then every rank but the last
                   calls barrier(), then every rank calls barrier() and tears down: the last rank's
                   one barrier pairs with the others' first, it destroys its group and exits 0; the
                   others fail in their second barrier ("Connection closed by peer")
--mode skip-fail   as skip, but the last rank exits with code 3 after its barrier, without teardown
--mode init-fail   under torchrun --max-restarts=1: in the first start rank 1 raises a transient
                   error at step --fault-step (of --steps); in the restarted start (TORCHELASTIC_RESTART_COUNT 1)
                   rank 1 calls init_process_group against a store address where nothing listens
                   and fails there after 4 s; rank 0 may fail first: where the launcher's store
                   kept rank 1's address of the first start, it connects there and is refused
--mode init-hang   in the first start rank 1 raises before init_process_group; in the restarted
                   start it calls init_process_group against an address where nothing listens and
                   waits there for 15 minutes, while the others wait in init on the launcher's store
                   for it: every rank of the restart is in init_process_group
--mode recover     under torchrun --max-restarts: in the first start rank 1 raises a transient error at
                   step --fault-step (writing WORKDIR/fault); the restarted start runs its --steps and
                   ends; with --load-s S every rank of a restarted start loads its model for S s before
                   init_process_group (a checkpoint read from slow storage)
--mode skip-save   as skip, but the ranks that stay write a checkpoint for --save-s s between their two
                   barriers: the last rank has left (exited 0) while they write
Rank r writes WORKDIR/ready.r (its pid) after its first step (in the first start), and
WORKDIR/start.G.r as it begins start G; init-hang's rank 1 writes WORKDIR/fault as it raises.
"""
import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist


def load_model(path: Path, seconds: float) -> None:
    """A model read from slow storage: a chunk at a time, for `seconds` in all."""
    if not path.exists():
        path.write_bytes(os.urandom(1 << 20))
    deadline = time.monotonic() + seconds
    with open(path, "rb") as f:
        while time.monotonic() < deadline:
            if not f.read(1 << 16):
                f.seek(0)
            time.sleep(0.05)


def save_checkpoint(path: Path, seconds: float) -> None:
    """A checkpoint written to slow storage: a chunk at a time, for `seconds` in all."""
    deadline = time.monotonic() + seconds
    with open(path, "wb") as f:
        while time.monotonic() < deadline:
            f.write(os.urandom(1 << 16))
            f.flush()
            time.sleep(0.05)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workdir", required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fault-step", type=int, default=20)
    p.add_argument("--load-s", type=float, default=0.0)
    p.add_argument("--save-s", type=float, default=10.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    start = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    work = Path(args.workdir)
    (work / f"start.{start}.{rank}").write_text(str(os.getpid()))
    if start == 0 and rank == 1 and args.mode == "init-hang":
        (work / "fault").write_text(str(time.time()))
        raise OSError("the data mount is not ready (injected)")
    if start > 0 and rank == 1 and args.mode in ("init-fail", "init-hang"):
        # a store address of its own (a stale config): nothing listens there
        wait = 4 if args.mode == "init-fail" else 900
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:9", rank=rank,
                                world_size=int(os.environ["WORLD_SIZE"]), timeout=timedelta(seconds=wait))
    if start > 0 and args.load_s:
        load_model(work / "model.pt", args.load_s)
    dist.init_process_group("gloo")
    last = dist.get_world_size() - 1
    total = torch.zeros(4)
    for step in range(args.steps):
        dist.all_reduce(total)
        if step == 0 and start == 0:
            (work / f"ready.{rank}").write_text(str(os.getpid()))
        if args.mode == "recover" and start == 0 and rank == 1 and step == args.fault_step:
            (work / "fault").write_text(str(time.time()))
            raise OSError("transient read error on the data mount (injected)")
        if args.mode in ("init-fail", "init-hang") and start == 0 and rank == 1 and step == args.fault_step:
            raise OSError("transient read error on the data mount (injected)")
        time.sleep(0.05)
    if args.mode in ("skip", "skip-fail", "skip-save"):
        if rank != last:
            dist.barrier()
            if args.mode == "skip-save":
                save_checkpoint(work / f"checkpoint.{rank}.pt", args.save_s)
        dist.barrier()
        if rank == last and args.mode == "skip-fail":
            sys.exit(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
