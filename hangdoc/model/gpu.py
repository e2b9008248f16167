"""What a GPU reading holds: NVML's devices, their processes and its own failures (`collect/gpu.py`)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from hangdoc.model.vocab import GpuActivity


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True)
class GpuDevice:
    index: int
    uuid: str
    name: str
    utilization_pct: int | None
    memory_util_pct: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class GpuState:
    status: str                    # "ok" or "unavailable"
    reason: str | None = None      # why NVML could not be read
    driver_version: str | None = None
    devices: tuple[GpuDevice, ...] = ()
    errors: tuple[str, ...] = ()   # per-device probes that failed

    @property
    def available(self) -> bool:
        return self.status == "ok"

    def device_of(self, pid: int) -> GpuDevice | None:
        return self._device_by_pid.get(pid)

    @cached_property
    def _device_by_pid(self) -> dict[int, GpuDevice]:
        index: dict[int, GpuDevice] = {}
        for device in self.devices:
            for proc in device.processes:
                index.setdefault(proc.pid, device)
        return index


# What a reading means. Utilisation is the share of time any kernel ran, so a kernel that spins
# reading a flag (how an NCCL collective waits for its peers) reads 100 %, like real work. On a real
# H200 (driver 580) the two came apart on power and memory traffic: a bf16 matrix-product loop read
# 99-100 %, memory 22-24 %, 684-694 W of 700 W with the SM clock held down to 1365-1485 MHz; a
# flag-reading spin kernel (4 x 128 threads) and torch's clock-spin kernel read 100 %, memory 0 %,
# 124-125 W at 1980 MHz, the draw of an idle CUDA context (0 %, 125 W). docs/gpu.md has the series.
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
