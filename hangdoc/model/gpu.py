"""What a GPU reading holds: NVML's devices, their processes and its own failures (`collect/gpu.py`)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


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
