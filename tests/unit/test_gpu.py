"""hangdoc.collect.gpu against the real pynvml bindings and a fake libnvidia-ml (tests/fakenvml)."""
from __future__ import annotations

import ctypes.util
import os
from pathlib import Path
from typing import Any, Callable

import pynvml
import pytest

from hangdoc.collect.gpu import open_nvml, sample_gpus
from hangdoc.model import GpuProcess, GpuState
from hangdoc.base.serde import from_dict, to_dict

RANK0, RANK1 = os.getpid(), os.getppid()

# GPU 0 holds a rank spinning in NCCL (the reading a spin kernel gave on a real H200: 100 %, no
# memory traffic, an idle GPU's 125 W); GPU 1 the rank that never reached the collective, on a
# board that cannot report its power draw.
TWO_GPUS = f"""
driver=550.54.15
device name=NVIDIA-H100 uuid=GPU-0000 util=100 mem_util=0 mem_total=85520809984 mem_used=2147483648 power_mw=125000 power_limit_mw=700000 sm_clock=1980 sm_clock_max=1980 pids={RANK0}:2147483648
device name=NVIDIA-H100 uuid=GPU-1111 util=0 mem_util=0 mem_total=85520809984 mem_used=1073741824 power_mw=unsupported power_limit_mw=700000 sm_clock=345 sm_clock_max=1980 pids={RANK1} gfx_pids={RANK1}:4096,4242:65536
"""


@pytest.fixture(autouse=True)
def fresh_pynvml() -> Any:
    """pynvml keeps its loaded library, function pointers and init count in module globals;
    each test starts from none and leaves the globals as it found them."""
    saved = (pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache), pynvml._nvmlLib_refcount)
    pynvml.nvmlLib, pynvml._nvmlLib_refcount = None, 0
    pynvml._nvmlGetFunctionPointer_cache.clear()
    yield
    pynvml.nvmlLib, pynvml._nvmlLib_refcount = saved[0], saved[2]
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlGetFunctionPointer_cache.update(saved[1])


@pytest.fixture
def fake_gpus(fake_nvml_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], str]:
    """Describe the GPUs the fake NVML reports; returns the library path to load."""
    def configure(config: str) -> str:
        path = tmp_path / "fake_nvml.conf"
        path.write_text(config)
        monkeypatch.setenv("FAKE_NVML_CONFIG", str(path))
        return str(fake_nvml_lib)
    return configure


@pytest.fixture
def two_gpus(fake_gpus: Callable[[str], str]) -> GpuState:
    return sample_gpus(library_path=fake_gpus(TWO_GPUS))


def test_every_gpu_is_listed_with_its_name_uuid_and_the_driver_version(two_gpus: GpuState) -> None:
    # GIVEN a host with two GPUs (TWO_GPUS)
    # WHEN hangdoc samples them (the two_gpus fixture)
    # THEN both are there, in index order, named, and NVML's driver version is recorded
    assert two_gpus.available and two_gpus.reason is None
    assert two_gpus.driver_version == "550.54.15"
    assert [(d.index, d.uuid, d.name) for d in two_gpus.devices] == [
        (0, "GPU-0000", "NVIDIA-H100"),
        (1, "GPU-1111", "NVIDIA-H100"),
    ]


def test_utilisation_and_memory_are_read_per_gpu(two_gpus: GpuState) -> None:
    # GIVEN a spinning GPU at 100 % and an idle one at 0 %
    spinning, idle = two_gpus.devices
    # THEN each reports its own utilisation and memory in bytes
    assert (spinning.utilization_pct, spinning.memory_util_pct) == (100, 0)
    assert (idle.utilization_pct, idle.memory_util_pct) == (0, 0)
    assert (spinning.memory_used_bytes, spinning.memory_total_bytes) == (2147483648, 85520809984)
    assert idle.memory_used_bytes == 1073741824


def test_power_is_in_watts_and_sm_clocks_in_mhz(two_gpus: GpuState) -> None:
    # GIVEN NVML reporting 125000 mW of a 700000 mW limit and the SM clock at its maximum
    spinning, idle = two_gpus.devices
    # THEN power is converted to watts and the clocks are read as MHz
    assert spinning.power_w == pytest.approx(125.0)
    assert spinning.power_limit_w == pytest.approx(700.0)
    assert (spinning.sm_clock_mhz, spinning.sm_clock_max_mhz) == (1980, 1980)
    assert (idle.sm_clock_mhz, idle.sm_clock_max_mhz) == (345, 1980)


def test_a_probe_the_gpu_does_not_support_is_none_and_the_rest_is_read(two_gpus: GpuState) -> None:
    # GIVEN GPU 1 answers NVML_ERROR_NOT_SUPPORTED for its power draw
    idle = two_gpus.devices[1]
    # THEN only that field is None; the sample went on
    assert idle.power_w is None
    assert idle.power_limit_w == pytest.approx(700.0)
    assert idle.utilization_pct == 0 and idle.sm_clock_mhz == 345


def test_each_pid_maps_to_the_gpu_it_runs_on(two_gpus: GpuState) -> None:
    # GIVEN one rank's pid on each GPU
    # WHEN hangdoc asks which GPU a pid is on
    # THEN it gets that GPU, and None for a pid on no GPU
    assert two_gpus.device_of(RANK0).index == 0
    assert two_gpus.device_of(RANK1).index == 1
    assert two_gpus.device_of(999_999_999) is None


def test_compute_and_graphics_processes_are_merged_once_per_pid(two_gpus: GpuState) -> None:
    # GIVEN GPU 1 lists RANK1 as a compute process with no memory figure and as a graphics
    #   process using 4096 bytes, plus another graphics-only process
    # THEN RANK1 appears once, with the memory NVML knows, and the other process is kept
    assert two_gpus.devices[1].processes == (
        GpuProcess(pid=RANK1, used_memory_bytes=4096),
        GpuProcess(pid=4242, used_memory_bytes=65536),
    )
    assert two_gpus.devices[0].processes == (GpuProcess(pid=RANK0, used_memory_bytes=2147483648),)


def test_a_driver_without_the_v3_process_queries_falls_back_to_v2(fake_gpus: Callable[[str], str]) -> None:
    # GIVEN a driver that predates nvmlDevice*RunningProcesses_v3
    class DriverWithoutV3:
        def __getattr__(self, name: str) -> Any:
            if name.endswith("RunningProcesses_v3"):
                def missing(handle: Any) -> Any:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
                return missing
            return getattr(pynvml, name)

        def __setattr__(self, name: str, value: Any) -> None:
            setattr(pynvml, name, value)

    # WHEN hangdoc samples the GPUs
    state = sample_gpus(nvml=DriverWithoutV3(), library_path=fake_gpus(TWO_GPUS))
    # THEN the pids still map to their GPUs
    assert state.device_of(RANK0).index == 0
    assert state.device_of(RANK1).index == 1


def test_driver_not_loaded_makes_the_gpus_unavailable_with_a_reason(fake_gpus: Callable[[str], str]) -> None:
    # GIVEN an NVML whose init fails with NVML_ERROR_DRIVER_NOT_LOADED
    library = fake_gpus("init_error=driver_not_loaded\n")
    # WHEN hangdoc samples the GPUs
    state = sample_gpus(library_path=library)
    # THEN nothing is raised and the state says why there is nothing to show
    assert state.status == "unavailable" and not state.available
    assert state.reason == "NVML could not be initialised: Driver Not Loaded (is the NVIDIA kernel module loaded?)"
    assert state.devices == ()


def test_a_host_with_no_gpus_is_unavailable(fake_gpus: Callable[[str], str]) -> None:
    # GIVEN an NVML that initialises but sees no GPUs
    state = sample_gpus(library_path=fake_gpus("driver=550.54.15\n"))
    # THEN the GPU state is unavailable and says so
    assert state == GpuState(status="unavailable", reason="NVML reports no GPUs on this host")


def test_a_library_path_that_does_not_exist_is_unavailable_with_a_reason(tmp_path: Path) -> None:
    # GIVEN a library path with nothing there
    missing = tmp_path / "libnvidia-ml.so.1"
    # WHEN hangdoc samples the GPUs with it
    state = sample_gpus(library_path=str(missing))
    # THEN nothing is raised; the reason names the library and the loader's complaint
    assert state.status == "unavailable"
    assert state.reason.startswith("could not load the NVML library: ")
    assert str(missing) in state.reason and "No such file" in state.reason


def test_the_library_can_be_named_by_HANGDOC_NVML_LIB(fake_gpus: Callable[[str], str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN HANGDOC_NVML_LIB names the fake library
    monkeypatch.setenv("HANGDOC_NVML_LIB", fake_gpus(TWO_GPUS))
    # WHEN hangdoc samples with no library_path
    state = sample_gpus()
    # THEN it loaded that library
    assert [d.uuid for d in state.devices] == ["GPU-0000", "GPU-1111"]


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this host has an NVIDIA driver")
def test_a_host_without_an_nvidia_driver_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN no libnvidia-ml on the host and no HANGDOC_NVML_LIB
    monkeypatch.delenv("HANGDOC_NVML_LIB", raising=False)
    # WHEN hangdoc samples the GPUs
    state = sample_gpus()
    # THEN the reason says the driver is missing and how to point at another library
    assert state.status == "unavailable"
    assert "NVML Shared Library Not Found" in state.reason and "HANGDOC_NVML_LIB" in state.reason


def test_a_session_opens_nvml_once_for_many_samples(fake_gpus: Callable[[str], str]) -> None:
    # GIVEN an open NVML session
    session = open_nvml(library_path=fake_gpus(TWO_GPUS))
    assert session.available and pynvml._nvmlLib_refcount == 1
    # WHEN the watch loop samples it several times, then closes it
    samples = [session.sample() for _ in range(3)]
    session.close()
    # THEN every sample is complete, NVML is shut down, and a late sample says why it is empty
    assert all(len(s.devices) == 2 for s in samples) and samples[0] == samples[2]
    assert pynvml._nvmlLib_refcount == 0
    assert session.sample() == GpuState(status="unavailable", reason="the NVML session is closed")


def test_switching_libraries_between_sessions_loads_the_new_one(fake_gpus: Callable[[str], str],
                                                               tmp_path: Path) -> None:
    # GIVEN a sample taken through the fake library
    assert sample_gpus(library_path=fake_gpus(TWO_GPUS)).available
    # WHEN the next sample names a library that is not there
    state = sample_gpus(library_path=str(tmp_path / "gone.so"))
    # THEN pynvml did not keep using the old one
    assert state.status == "unavailable" and "gone.so" in state.reason


def test_the_gpu_state_round_trips_through_json(two_gpus: GpuState) -> None:
    # GIVEN a sampled GpuState, None fields included
    # WHEN it is turned into a dict and back
    # THEN nothing is lost
    assert from_dict(GpuState, to_dict(two_gpus)) == two_gpus


class CountingNvml:
    """pynvml's API over one fixed GPU, counting the calls and offering the v2 memory query."""

    NVMLError = pynvml.NVMLError
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    nvmlMemory_v2 = pynvml.nvmlMemory_v2

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return self.answer(name, *args, **kwargs)
        return call

    def answer(self, name: str, *args: Any, **kwargs: Any) -> Any:
        from types import SimpleNamespace as NS
        if name == "nvmlDeviceGetCount":
            return 1
        if name == "nvmlDeviceGetMemoryInfo":
            # the driver's reserve (615 MiB) counts as used in v1 and not in v2, as on an H200
            reserved = 615 << 20
            used = 1139 << 20
            return NS(total=150754820096, used=used if kwargs.get("version") else used + reserved, free=0)
        if name == "nvmlDeviceGetUtilizationRates":
            return NS(gpu=100, memory=0)
        if name.startswith("nvmlDeviceGetComputeRunningProcesses") or name.startswith("nvmlDeviceGetGraphicsRunningProcesses"):
            return []
        if name in ("nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetClockInfo"):
            return 1980
        if name in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit"):
            return 125000 if name.endswith("Usage") else 700000
        return "x"


def test_memory_used_is_what_nvidia_smi_shows_and_the_max_clock_is_read_once() -> None:
    # GIVEN a driver that offers the v2 memory query (the driver reserves 615 MiB that v1 counts as used)
    nvml = CountingNvml()
    # WHEN a session samples the GPU five times
    with open_nvml(nvml) as session:
        states = [session.sample() for _ in range(5)]
    # THEN used memory is nvidia-smi's figure (1139 MiB, not 1754), and the static maximum SM
    # clock (the slowest query on a real driver) was asked once, at open, yet is in every sample
    assert {s.devices[0].memory_used_bytes for s in states} == {1139 << 20}
    assert {s.devices[0].sm_clock_max_mhz for s in states} == {1980}
    assert nvml.calls["nvmlDeviceGetMaxClockInfo"] == 1
    assert nvml.calls["nvmlDeviceGetClockInfo"] == 5


def test_a_driver_without_the_v2_memory_query_answers_v1(fake_gpus: Callable[[str], str]) -> None:
    # GIVEN the fake libnvidia-ml, which has only the v1 memory query
    state = sample_gpus(library_path=fake_gpus(TWO_GPUS))
    # THEN the memory still reads
    assert state.devices[0].memory_used_bytes == 2147483648
