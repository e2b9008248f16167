"""DDP driven by `while True: batch = next(it)`: StopIteration ends an epoch, and where the run
stands lives on an object (`state.step`, `state.epoch`), not in the loop's locals.

    torchrun --nproc_per_node=2 next_loop.py --output-dir DIR [--steps N] [--nccl-shape]

Rank 0 prints `step N loss L S steps/s` every 50 steps and saves a checkpoint at the end. The
job is plain_ddp.py's (`build`); --nccl-shape as in module_loop.py.
"""
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

# torchrun runs this file as a script: its siblings import by name
from plain_ddp import all_reduce_async, build, forward_backward, mark_ready, parse_args


class TrainState:
    """Where the run stands, kept on an object as a resumable trainer keeps it."""

    def __init__(self):
        self.step = 0
        self.epoch = 0
        self.last_log = time.monotonic()


def main():
    args = parse_args("--steps", 1500)

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net, model, optimizer, sampler, loader = build(args.nccl_shape, args.batch_size)

    state = TrainState()
    it = iter(loader)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            state.epoch += 1
            sampler.set_epoch(state.epoch)
            it = iter(loader)
            continue
        x, y = batch
        loss = forward_backward(model, optimizer, x, y)
        if args.nccl_shape:
            pending = all_reduce_async(net)
            while not all(w.is_completed() for w in pending): pass  # noqa: E701 (the sync spins on one line)
        optimizer.step()
        state.step += 1
        if state.step == 1:
            mark_ready()
        if state.step % 50 == 0 and rank == 0:
            now = time.monotonic()
            print(f"step {state.step} loss {loss.item():.4f} {50 / (now - state.last_log):.1f} steps/s", flush=True)
            state.last_log = now
        if state.step >= args.steps:
            break
    if rank == 0:
        torch.save({"step": state.step, "model": net.state_dict()}, Path(args.output_dir) / "checkpoint.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
