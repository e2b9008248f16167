"""Probe the host a job will run on; every probe can be replaced, so tests fake any host.

`HostProbes()` reads the real machine. A test passes a /proc root, an arch string, an env
mapping, a library finder or a command runner. A probe that fails records why; it
never raises.
"""
from __future__ import annotations

import ctypes.util
import importlib.util
import math
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hangdoc.check.model import CpuFacts, EnvFacts, Launch, NvmlFacts, PtraceFacts, PySpyFacts, ShmFacts
from hangdoc.check.nvml import probe_nvml

CAP_SYS_PTRACE = 19
COLLECTIVE_ENV_PREFIXES = ("TORCH_NCCL_", "NCCL_", "GLOO_", "TORCH_GLOO_", "TORCH_DISTRIBUTED_")
OPENMP_LIBS = ("gomp", "arm_compute")


def run_command(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout


def torch_lib_dirs() -> tuple[Path, ...]:
    """torch/lib and the wheel's bundled torch.libs, found without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return ()
    root = Path(next(iter(spec.submodule_search_locations)))
    return (root / "lib", root.parent / "torch.libs")


@dataclass(frozen=True)
class HostProbes:
    """Where `check env` reads the host from (the live capture has its own, `collect.snapshot.Probes`)."""

    proc_root: Path = Path("/proc")
    sys_root: Path = Path("/sys")
    shm_path: Path = Path("/dev/shm")
    arch: str | None = None                      # platform.machine()
    env: Mapping[str, str] | None = None         # os.environ
    start_method: str | None = None              # multiprocessing's default
    cpu_online: int | None = None
    cpu_affinity: int | None = None
    uid: int | None = None
    find_library: Callable[[str], str | None] = ctypes.util.find_library
    lib_dirs: tuple[Path, ...] | None = None     # torch_lib_dirs()
    python: str = field(default_factory=lambda: sys.executable)
    which: Callable[[str], str | None] = shutil.which
    run: Callable[[list[str]], str] = run_command
    nvml: Callable[[], NvmlFacts] = probe_nvml


def probe_env(launch: Launch, probes: HostProbes | None = None) -> EnvFacts:
    p = probes or HostProbes()
    env = dict(os.environ if p.env is None else p.env)
    return EnvFacts(
        arch=p.arch or platform.machine(),
        start_method=p.start_method or _default_start_method(),
        openmp_libs=_openmp_libs(p),
        cpu=_cpu(p),
        ptrace=_ptrace(p),
        py_spy=_py_spy(p),
        nvml=p.nvml(),
        shm=_shm(p.shm_path),
        collective_env={k: v for k, v in sorted(env.items()) if k.startswith(COLLECTIVE_ENV_PREFIXES)},
        timeouts=_timeouts(env),
        launch=launch,
    )


def _default_start_method() -> str:
    # get_start_method() without allow_none would fix the context for this process.
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]


def _openmp_libs(p: HostProbes) -> tuple[str, ...]:
    found = []
    for name in OPENMP_LIBS:
        try:
            path = p.find_library(name)
        except Exception:
            path = None
        if path:
            found.append(path)
    for folder in torch_lib_dirs() if p.lib_dirs is None else p.lib_dirs:
        for name in OPENMP_LIBS:
            found.extend(str(lib) for lib in sorted(Path(folder).glob(f"lib{name}*.so*")))
    return tuple(dict.fromkeys(found))


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cpu(p: HostProbes) -> CpuFacts:
    online = p.cpu_online or os.cpu_count() or 1
    affinity = p.cpu_affinity or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else online)
    quota = _cgroup_quota(p.sys_root)
    usable = min(affinity, max(1, math.ceil(quota))) if quota else affinity
    return CpuFacts(online=online, usable=usable, quota=quota)


def _cgroup_quota(sys_root: Path) -> float | None:
    v2 = _read(sys_root / "fs/cgroup/cpu.max")
    if v2:
        parts = v2.split()
        return int(parts[0]) / int(parts[1]) if len(parts) == 2 and parts[0] != "max" else None
    v1_quota = _read(sys_root / "fs/cgroup/cpu/cpu.cfs_quota_us")
    v1_period = _read(sys_root / "fs/cgroup/cpu/cpu.cfs_period_us")
    if v1_quota and v1_period and int(v1_quota) > 0:
        return int(v1_quota) / int(v1_period)
    return None


def _ptrace(p: HostProbes) -> PtraceFacts:
    scope_text = _read(p.proc_root / "sys/kernel/yama/ptrace_scope")
    scope = int(scope_text) if scope_text and scope_text.strip().isdigit() else None
    cap = None
    for line in (_read(p.proc_root / "self/status") or "").splitlines():
        if line.startswith("CapEff:"):
            cap = bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    return PtraceFacts(scope=scope, cap_sys_ptrace=cap, uid=os.getuid() if p.uid is None else p.uid)


def _py_spy(p: HostProbes) -> PySpyFacts:
    beside = Path(p.python).parent / "py-spy"
    path = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else p.which("py-spy")
    if not path:
        return PySpyFacts(None, error="not found next to this Python nor on PATH")
    try:
        out = p.run([path, "--version"]).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return PySpyFacts(path, error=f"`py-spy --version` failed: {exc}")
    return PySpyFacts(path, version=out.removeprefix("py-spy").strip() or out)


def _shm(path: Path) -> ShmFacts:
    try:
        st = os.statvfs(path)
    except OSError:
        return ShmFacts(str(path), None, None)
    return ShmFacts(str(path), st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def _timeouts(env: Mapping[str, str]) -> dict[str, str]:
    off = [k for k in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING") if env.get(k) == "0"]
    nccl = f"never ({off[0]}=0)" if off else "10 min (default)"
    timeouts = {"nccl": nccl, "gloo": "30 min (default)"}
    if "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" in env:
        timeouts["nccl watchdog heartbeat"] = f"{env['TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC']} s"
    return timeouts
