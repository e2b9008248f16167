"""A 2-rank gloo job that ends one chosen way, for the tests of how a rank's exit is read.

--mode quiet     --steps all_reduce steps, then both ranks exit 0; prints nothing at all
--mode ragged    as quiet, but rank 1 lingers --linger s after the last collective before exiting 0
--mode forever   steps until killed (a test kills a rank from outside)
--mode kill9     --fault-after s after its first step rank 1 allocates --alloc-mb MB, touches it
                 holds it 1.5 s and is SIGKILLed (what the kernel's OOM killer does)
--mode mismatch  --fault-after s after its first step rank 1 all_reduces a tensor of another size:
                 gloo aborts the rank that receives it (SIGABRT)
--mode hog       --fault-after s after its first step rank 1 allocates --alloc-mb MB more every
                 0.2 s until something (a memory cgroup's OOM killer) kills it
--mode transient as quiet, but under torchrun --max-restarts rank 1 raises RuntimeError --fault-after s
                 after its first step in the first start only (TORCHELASTIC_RESTART_COUNT 0): the
                 restarted ranks run to the end
--mode raise     as transient, in every start: the restarts are used up
--restart-load S a restarted start computes S s after init_process_group before its first step
                 (a slow model load)
Rank r writes WORKDIR/ready.r (its pid) after its first step; rank 1 writes WORKDIR/fault
just before its fault.
"""
import argparse
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist


def load_model(seconds: float) -> None:
    """A restarted start's slow model load: `seconds` of compute before its first step."""
    weights, end = torch.zeros(256, 256), time.monotonic() + seconds
    while time.monotonic() < end:
        weights = torch.tanh(weights @ weights + 1.0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workdir", required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--linger", type=float, default=4.0)
    p.add_argument("--fault-after", type=float, default=3.0)
    p.add_argument("--alloc-mb", type=int, default=200)
    p.add_argument("--restart-load", type=float, default=0.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if args.restart_load and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        load_model(args.restart_load)
    total = torch.zeros(4)
    step, started = 0, None
    while args.mode not in ("quiet", "ragged", "transient", "raise") or step < args.steps:
        late = started is not None and time.monotonic() - started > args.fault_after
        if late and rank == 1 and args.mode == "mismatch":
            Path(args.workdir, "fault").write_text(str(time.time()))
            dist.all_reduce(torch.zeros(64))
        if late and rank == 1 and args.mode == "kill9":
            hog = torch.ones(args.alloc_mb << 18)          # 4-byte floats, every page touched
            Path(args.workdir, "fault").write_text(str(hog.numel()))
            time.sleep(1.5)                                # long enough for a sample to see it
            os.kill(os.getpid(), signal.SIGKILL)
        first_start = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if late and rank == 1 and (args.mode == "raise" or (args.mode == "transient" and first_start)):
            Path(args.workdir, "fault").write_text(str(time.time()))
            raise RuntimeError("the data server dropped the connection (injected)")
        if late and rank == 1 and args.mode == "hog":
            Path(args.workdir, "fault").write_text(str(time.time()))
            hogs = []
            while True:
                hogs.append(torch.ones(args.alloc_mb << 18))
                time.sleep(0.2)
        dist.all_reduce(total)
        if step == 0:
            Path(args.workdir, f"ready.{rank}").write_text(str(os.getpid()))
            started = time.monotonic()
        step += 1
        time.sleep(0.05)
    if args.mode == "ragged" and rank == 1:
        time.sleep(args.linger)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
