"""A rank at a sync on its own GPU stream, judged by what its GPU does (pure). What a GPU reading
means, work, a spinning wait or nothing, is `model/gpu.py: gpu_activity`."""
from __future__ import annotations

from hangdoc.analyze.classify import Reading, is_gpu_sync
from hangdoc.model import GpuActivity, RankState

GPU_WORK = "GPU work"     # a rank at a sync whose GPU computes: its reading's detail begins so


def judged_by_gpu(reading: Reading, activity: GpuActivity | None) -> Reading:
    """A host thread at a sync on its own GPU stream (`.item()`, `.cpu()`, `torch.cuda.synchronize`),
    judged by what that GPU does: busy, the rank computes there (a GPU straggler, or a kernel that
    never ends); spinning or idle, it waits on what is queued there (NCCL's collective). With no
    GPU reading it stays a wait, as the report says (what the GPU did is unknown)."""
    if activity == GpuActivity.BUSY and reading.state == RankState.COLLECTIVE and is_gpu_sync(reading.detail):
        where = str(reading.detail).partition("(")[2].rstrip(")") or "a GPU sync"
        return Reading(RankState.COMPUTE, f"{GPU_WORK} (host at {where})", reading.frame)
    return reading
