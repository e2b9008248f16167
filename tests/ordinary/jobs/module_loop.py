"""DDP with the training loop at module level, as many research scripts keep it: no main(), the
step counter and the batch are module globals (py-spy shows no locals for a `<module>` frame).

    torchrun --nproc_per_node=2 module_loop.py --output-dir DIR [--steps N] [--nccl-shape]

Rank 0 prints `step N loss L S steps/s` every 50 steps and saves a checkpoint at the end. The
job is plain_ddp.py's (`build`); --nccl-shape: no DDP wrapper, the gradients all-reduced with
async_op=True and the sync line spinning until they are done (NCCL's wait, on CPU).
"""
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

# torchrun runs this file as a script: its siblings import by name
from plain_ddp import all_reduce_async, build, forward_backward, mark_ready, parse_args

args = parse_args("--steps", 1500)

dist.init_process_group("gloo")
rank = dist.get_rank()
net, model, optimizer, sampler, loader = build(args.nccl_shape, args.batch_size)

global_step = 0
epoch = 0
last_log = time.monotonic()
while global_step < args.steps:
    sampler.set_epoch(epoch)
    for step, (x, y) in enumerate(loader):
        loss = forward_backward(model, optimizer, x, y)
        if args.nccl_shape:
            pending = all_reduce_async(net)
            while not all(w.is_completed() for w in pending): pass  # noqa: E701 (the sync spins on one line)
        optimizer.step()
        global_step += 1
        if global_step == 1:
            mark_ready()
        if global_step % 50 == 0 and rank == 0:
            now = time.monotonic()
            print(f"step {global_step} loss {loss.item():.4f} {50 / (now - last_log):.1f} steps/s", flush=True)
            last_log = now
        if global_step >= args.steps:
            break
    epoch += 1
if rank == 0:
    torch.save({"step": global_step, "model": net.state_dict()}, Path(args.output_dir) / "checkpoint.pt")
dist.barrier()
dist.destroy_process_group()
