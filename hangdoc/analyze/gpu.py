"""What a GPU reading means: work, a spinning wait, or nothing (pure).

Utilisation is the share of time any kernel ran, so a kernel that spins reading a flag (how
an NCCL collective waits for its peers) reads 100 %, like real work. On a real H200 (driver
580) the two came apart on power and memory traffic: a bf16 matrix-product loop read 99-100 %,
memory 22-24 %, 684-694 W of 700 W with the SM clock held down to 1365-1485 MHz; a flag-reading
spin kernel (4 x 128 threads) and torch's clock-spin kernel read 100 %, memory 0 %, 124-125 W
at 1980 MHz, the draw of an idle CUDA context (0 %, 125 W). docs/gpu.md has the series.
"""
from __future__ import annotations

from hangdoc.analyze.classify import Reading, is_gpu_sync
from hangdoc.model import GpuActivity, GpuDevice, RankState

BUSY_UTIL_PCT = 10           # below this share of time with a kernel running, the GPU is idle
SPIN_UTIL_PCT = 90           # a spin holds a kernel on the GPU all the time
SPIN_MEMORY_PCT = 1          # and moves no memory (work on the H200: 22-24 %)
SPIN_POWER_SHARE = 0.25      # and draws what an idle GPU draws (H200: 18 % of the limit; work: 99 %)


def gpu_activity(device: GpuDevice | None) -> GpuActivity | None:
    """IDLE, BUSY or SPIN; None when the reading cannot tell (no utilisation, or a busy GPU
    whose power or memory traffic NVML does not report)."""
    if device is None or device.utilization_pct is None:
        return None
    if device.utilization_pct < BUSY_UTIL_PCT:
        return GpuActivity.IDLE
    power, limit, memory = device.power_w, device.power_limit_w, device.memory_util_pct
    if power is None or not limit or memory is None:
        return GpuActivity.BUSY if device.utilization_pct < SPIN_UTIL_PCT else None
    if device.utilization_pct >= SPIN_UTIL_PCT and memory <= SPIN_MEMORY_PCT and power <= SPIN_POWER_SHARE * limit:
        return GpuActivity.SPIN
    return GpuActivity.BUSY


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
