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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workdir", required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fault-step", type=int, default=20)
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
    dist.init_process_group("gloo")
    last = dist.get_world_size() - 1
    total = torch.zeros(4)
    for step in range(args.steps):
        dist.all_reduce(total)
        if step == 0 and start == 0:
            (work / f"ready.{rank}").write_text(str(os.getpid()))
        if args.mode in ("init-fail", "init-hang") and start == 0 and rank == 1 and step == args.fault_step:
            raise OSError("transient read error on the data mount (injected)")
        time.sleep(0.05)
    if args.mode in ("skip", "skip-fail"):
        if rank != last:
            dist.barrier()
        dist.barrier()
        if rank == last and args.mode == "skip-fail":
            sys.exit(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
