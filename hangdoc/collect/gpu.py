"""What every GPU on the host is doing, read through NVML; the only module that imports pynvml.

A rank waiting in an NCCL collective spins its GPU at ~100 % utilisation while the rank
that never arrived may read 0 %, so utilisation alone points the wrong way; power draw and
SM clock tell a spin-wait from real work. When NVML cannot be used the answer is a
`GpuState(status="unavailable", reason=...)`, never an exception.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any

import pynvml

from hangdoc.model import GpuDevice, GpuProcess, GpuState

LIBRARY_ENV = "HANGDOC_NVML_LIB"
_SYSTEM_LIBRARY = "libnvidia-ml.so.1"

# NVML's return codes are part of its ABI; these are the ones worth a hint.
_HINTS = {
    4: "this user may not read the GPUs",
    9: "is the NVIDIA kernel module loaded?",
    12: f"no NVIDIA driver is installed here; {LIBRARY_ENV} can name another libnvidia-ml",
    18: "the driver was upgraded without a reboot",
}


class NvmlSession:
    """NVML initialised once, so a watch loop can `sample()` every interval cheaply.

    A session that could not open samples as the unavailable state it was opened with.
    """

    def __init__(self, nvml: Any | None, devices: tuple[tuple[int, Any, str, str, int | None], ...] = (),
                 driver_version: str | None = None, unavailable: GpuState | None = None) -> None:
        self._nvml = nvml
        self._devices = devices            # (index, handle, uuid, name, max SM clock)
        self._driver_version = driver_version
        self._unavailable = unavailable

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def sample(self) -> GpuState:
        if self._nvml is None:
            return self._unavailable or _unavailable("the NVML session is closed")
        return GpuState(
            status="ok",
            driver_version=self._driver_version,
            devices=tuple(_read_device(self._nvml, *device) for device in self._devices),
        )

    def close(self) -> None:
        nvml, self._nvml = self._nvml, None
        if nvml is not None:
            _shutdown(nvml)
            self._unavailable = _unavailable("the NVML session is closed")

    def __enter__(self) -> NvmlSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_nvml(nvml: Any = None, library_path: str | None = None) -> NvmlSession:
    """Initialise NVML and find the GPUs; never raises.

    `nvml` is pynvml or a stand-in with its API; `library_path` (default: $HANGDOC_NVML_LIB,
    then the system's libnvidia-ml.so.1) is the shared library pynvml should load.
    """
    nvml = pynvml if nvml is None else nvml
    why_not = _use_library(nvml, library_path or os.environ.get(LIBRARY_ENV) or None)
    if why_not:
        return _failed(why_not)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return _failed(f"NVML could not be initialised: {_explain(exc)}")
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as exc:
        _shutdown(nvml)
        return _failed(f"NVML could not count the GPUs: {_explain(exc)}")

    devices = []
    refused: BaseException | None = None
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:      # e.g. a GPU outside this container's device cgroup
            refused = exc
            continue
        uuid = _probe(nvml, nvml.nvmlDeviceGetUUID, handle) or ""
        name = _probe(nvml, nvml.nvmlDeviceGetName, handle) or ""
        # The maximum SM clock never changes, and on a real driver (580, H200) it is the slowest
        # query of a sample (1.1-4.5 ms, against microseconds for the rest): read it once.
        max_clock = _probe(nvml, nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM)
        devices.append((index, handle, uuid, name, max_clock))
    if not devices:
        _shutdown(nvml)
        if refused is None:
            return _failed("NVML reports no GPUs on this host")
        return _failed(f"NVML could open none of its {count} GPUs: {_explain(refused)}")
    return NvmlSession(nvml, tuple(devices), _probe(nvml, nvml.nvmlSystemGetDriverVersion))


def sample_gpus(nvml: Any = None, library_path: str | None = None) -> GpuState:
    """One sample of every GPU: open NVML, read, close. Never raises."""
    with open_nvml(nvml, library_path) as session:
        return session.sample()


def _read_device(nvml: Any, index: int, handle: Any, uuid: str, name: str, max_clock: int | None) -> GpuDevice:
    util = _probe(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
    memory = _memory(nvml, handle)
    return GpuDevice(
        index=index,
        uuid=uuid,
        name=name,
        utilization_pct=None if util is None else util.gpu,
        memory_util_pct=None if util is None else util.memory,
        memory_used_bytes=None if memory is None else memory.used,
        memory_total_bytes=None if memory is None else memory.total,
        power_w=_watts(_probe(nvml, nvml.nvmlDeviceGetPowerUsage, handle)),
        power_limit_w=_watts(_probe(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, handle)),
        sm_clock_mhz=_probe(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
        sm_clock_max_mhz=max_clock,
        processes=_processes(nvml, handle),
    )


def _memory(nvml: Any, handle: Any) -> Any:
    """The GPU's memory, `used` as nvidia-smi counts it: the v2 query leaves out what the driver
    reserves (615 MiB on an H200 with driver 580, which the v1 query counts as used); drivers and
    stand-ins without v2 answer the v1 query."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
        except (nvml.NVMLError, TypeError):
            pass
    return _probe(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)


def _processes(nvml: Any, handle: Any) -> tuple[GpuProcess, ...]:
    """Compute and graphics processes on one GPU, one entry per pid.

    NVML reports pids in the host's pid namespace: inside a container they will not match
    the job's pids unless it runs with the host's (`--pid=host`).
    """
    merged: dict[int, GpuProcess] = {}
    for kind in ("Compute", "Graphics"):
        for proc in _probe(nvml, _running_processes, nvml, handle, kind) or ():
            known = merged.get(proc.pid)
            if known is None or known.used_memory_bytes is None:
                merged[proc.pid] = GpuProcess(pid=proc.pid, used_memory_bytes=proc.usedGpuMemory)
    return tuple(merged.values())


def _running_processes(nvml: Any, handle: Any, kind: str) -> list[Any]:
    try:
        return getattr(nvml, f"nvmlDeviceGet{kind}RunningProcesses_v3")(handle)
    except nvml.NVMLError_FunctionNotFound:     # drivers older than the _v3 queries
        return getattr(nvml, f"nvmlDeviceGet{kind}RunningProcesses_v2")(handle)


def _use_library(nvml: Any, path: str | None) -> str | None:
    """Make pynvml's next nvmlInit use `path`, or the system library when it is None.

    pynvml keeps the loaded CDLL in the global `nvmlLib` and caches function pointers by
    name, so switching libraries means replacing the one and emptying the other. Returns
    why it could not, or None.
    """
    if not hasattr(nvml, "nvmlLib"):           # a stand-in with no library to load
        return None
    loaded = getattr(nvml.nvmlLib, "_name", None)
    if loaded == (path or _SYSTEM_LIBRARY) or (path is None and loaded is None):
        return None
    if getattr(nvml, "_nvmlLib_refcount", 0) > 0:
        return f"NVML is already open in this process with another library ({loaded})"
    try:
        library = ctypes.CDLL(path) if path else None   # None: pynvml loads the system one
    except OSError as exc:
        return f"could not load the NVML library: {exc}"
    with nvml.libLoadLock:
        nvml.nvmlLib = library
        nvml._nvmlGetFunctionPointer_cache.clear()
    return None


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass


def _probe(nvml: Any, fn: Any, *args: Any) -> Any:
    """`fn(*args)`, or None when NVML cannot answer it (not supported, no permission, ...)."""
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000.0


def _explain(exc: BaseException) -> str:
    hint = _HINTS.get(getattr(exc, "value", None))
    return f"{exc} ({hint})" if hint else str(exc)


def _unavailable(reason: str) -> GpuState:
    return GpuState(status="unavailable", reason=reason)


def _failed(reason: str) -> NvmlSession:
    return NvmlSession(None, unavailable=_unavailable(reason))
