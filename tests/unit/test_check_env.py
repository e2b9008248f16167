"""`hangdoc check env` on faked hosts: every probe is injected."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from hangdoc.registry import record
from hangdoc.check.env import check_env
from hangdoc.check.host import HostProbes
from hangdoc.check.model import NvmlFacts
from hangdoc.cli import main

CAP_ALL = "000001fffeffffff"          # CapEff of root with every capability (bit 19: SYS_PTRACE)
CAP_NONE = "0000000000000000"


def fake_host(tmp_path: Path, *, arch: str = "x86_64", scope: int | None = None, cap_eff: str = CAP_ALL,
              cpus: int = 8, cpu_max: str | None = None, libs: tuple[str, ...] = (),
              env: dict[str, str] | None = None, py_spy: bool = True, start_method: str = "fork") -> HostProbes:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True, exist_ok=True)
    (proc / "self/status").write_text(f"Name:\tpython\nCapEff:\t{cap_eff}\n")
    if scope is not None:
        (proc / "sys/kernel/yama").mkdir(parents=True, exist_ok=True)
        (proc / "sys/kernel/yama/ptrace_scope").write_text(f"{scope}\n")
    sys_root = tmp_path / "sys"
    (sys_root / "fs/cgroup").mkdir(parents=True, exist_ok=True)
    if cpu_max:
        (sys_root / "fs/cgroup/cpu.max").write_text(cpu_max + "\n")
    torch_lib = tmp_path / "torch_lib"
    torch_lib.mkdir(exist_ok=True)
    for lib in libs:
        (torch_lib / lib).write_bytes(b"")
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    if py_spy:
        spy = bindir / "py-spy"
        spy.write_text("#!/bin/sh\n")
        spy.chmod(0o755)
    return HostProbes(
        proc_root=proc, sys_root=sys_root, shm_path=tmp_path, arch=arch, env=env or {},
        start_method=start_method, cpu_online=cpus, cpu_affinity=cpus, uid=1000,
        find_library=lambda name: None, lib_dirs=(torch_lib,), python=str(bindir / "python"),
        which=lambda name: None, run=lambda argv: "py-spy 0.4.3\n",
        nvml=lambda: NvmlFacts(False, "NVML Shared Library Not Found"),
    )


def rules(result) -> dict[str, object]:
    return {f.rule: f for f in result.findings}


def test_aarch64_fork_with_arm_compute_library_is_fork_unsafe_arm_with_the_spawn_fix(tmp_path):
    # GIVEN an aarch64 host whose torch ships libgomp and libarm_compute, fork by default
    probes = fake_host(tmp_path, arch="aarch64", libs=("libgomp-a34b3233.so.1.0.0", "libarm_compute-c0ffee.so"))
    # WHEN checked with 4 workers per rank
    result = check_env(num_workers=4, probes=probes)
    # THEN fork-unsafe-arm warns and the fix is the spawn start method
    finding = rules(result)["fork-unsafe-arm"]
    assert finding.severity.value == "warning"
    assert "aarch64 host forks DataLoader workers" in finding.title
    assert "multiprocessing start method: fork (DataLoader's default)" in finding.evidence
    assert "libarm_compute-c0ffee.so" in " ".join(finding.evidence)
    assert "spawn" in finding.fix and finding.fix == record("fork-unsafe-arm").fix


@pytest.mark.parametrize("change", [{"arch": "x86_64"}, {"start_method": "spawn"}, {"libs": ()}])
def test_no_fork_unsafe_arm_on_x86_with_spawn_or_without_openmp(tmp_path, change):
    settings = {"arch": "aarch64", "libs": ("libgomp.so.1",), **change}
    result = check_env(num_workers=4, probes=fake_host(tmp_path, **settings))
    assert "fork-unsafe-arm" not in rules(result)


def test_no_fork_unsafe_arm_without_workers(tmp_path):
    result = check_env(num_workers=0, probes=fake_host(tmp_path, arch="aarch64", libs=("libgomp.so.1",)))
    assert "fork-unsafe-arm" not in rules(result)
    assert rules(result)["gpu-starved"].severity.value == "info"


def test_more_workers_than_cpus_is_oversubscribed(tmp_path):
    # GIVEN 4 CPUs, 2 ranks x 4 workers
    result = check_env(num_workers=4, nproc_per_node=2, probes=fake_host(tmp_path, cpus=4))
    finding = rules(result)["cpu-oversubscribed"]
    assert finding.title == "2 ranks x 4 workers = 8 DataLoader workers on 4 usable CPUs"
    assert "4 usable CPUs / 2 ranks: at most 2 workers per rank" in finding.evidence


def test_a_cgroup_quota_caps_the_usable_cpus(tmp_path):
    result = check_env(num_workers=2, probes=fake_host(tmp_path, cpus=16, cpu_max="200000 100000"))
    assert (result.facts.cpu.online, result.facts.cpu.usable, result.facts.cpu.quota) == (16, 2, 2.0)
    assert "cpu-oversubscribed" not in rules(result)
    result = check_env(num_workers=3, probes=fake_host(tmp_path, cpus=16, cpu_max="200000 100000"))
    assert "cpu-oversubscribed" in rules(result)


@pytest.mark.parametrize("scope, cap, denied", [
    (None, CAP_NONE, False), (0, CAP_NONE, False), (1, CAP_NONE, True), (1, CAP_ALL, False),
    (2, CAP_NONE, True), (3, CAP_ALL, True),
])
def test_ptrace_scope_and_cap_sys_ptrace_decide_whether_py_spy_may_attach(tmp_path, scope, cap, denied):
    result = check_env(probes=fake_host(tmp_path, scope=scope, cap_eff=cap))
    assert ("ptrace-denied" in rules(result)) is denied
    assert result.facts.ptrace.scope == scope
    if denied:
        assert any("--cap-add=SYS_PTRACE" in e for e in rules(result)["ptrace-denied"].evidence)


def test_py_spy_found_beside_python_reports_its_version_and_missing_is_a_warning(tmp_path):
    found = check_env(probes=fake_host(tmp_path / "a"))
    assert found.facts.py_spy.version == "0.4.3"
    assert "py-spy-missing" not in rules(found)
    missing = check_env(probes=fake_host(tmp_path / "b", py_spy=False))
    assert missing.facts.py_spy.path is None
    assert rules(missing)["py-spy-missing"].severity.value == "warning"


def test_nvml_unavailable_is_an_info_with_the_reason(tmp_path):
    finding = rules(check_env(probes=fake_host(tmp_path)))["nvml-unavailable"]
    assert finding.severity.value == "info"
    assert finding.evidence == ("NVML Shared Library Not Found",)


def test_shm_smaller_than_prefetched_batches_is_critical(tmp_path):
    # GIVEN batches far larger than any /dev/shm
    result = check_env(num_workers=4, nproc_per_node=2, batch_bytes=10**16, probes=fake_host(tmp_path))
    finding = rules(result)["shm-too-small"]
    assert finding.severity.value == "critical"
    assert finding.evidence[0].startswith("2 ranks x 4 workers x prefetch_factor 2 x ")


def test_unmounted_shm_is_a_warning(tmp_path):
    probes = replace(fake_host(tmp_path), shm_path=tmp_path / "no-shm")
    result = check_env(num_workers=2, batch_bytes=1000, probes=probes)
    assert "is not mounted" in rules(result)["shm-too-small"].title


def test_collective_timeouts_default_and_async_error_handling_off_never_times_out(tmp_path):
    default = check_env(probes=fake_host(tmp_path))
    assert default.facts.timeouts == {"nccl": "10 min (default)", "gloo": "30 min (default)"}
    env = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "NCCL_DEBUG": "INFO", "HOME": "/root"}
    off = check_env(probes=fake_host(tmp_path, env=env))
    assert off.facts.timeouts["nccl"] == "never (TORCH_NCCL_ASYNC_ERROR_HANDLING=0)"
    assert off.facts.collective_env == {"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}
    assert rules(off)["collective-timeout-disabled"].severity.value == "warning"


def test_a_healthy_fake_host_is_clean(tmp_path):
    probes = replace(fake_host(tmp_path), nvml=lambda: NvmlFacts(True, None, "550.54", 8))
    result = check_env(num_workers=4, nproc_per_node=2, batch_bytes=1000, probes=probes)
    assert result.findings == ()


def test_cli_env_on_this_host_prints_json_facts(capsys):
    code = main(["check", "env", "--num-workers", "1", "--format", "json", "--fail-on", "critical"])
    report = json.loads(capsys.readouterr().out)
    assert code in (0, 1)
    assert report["schema"] == "hangdoc/check-v1" and report["command"] == "env"
    assert {"arch", "start_method", "cpu", "ptrace", "py_spy", "nvml", "shm", "timeouts"} <= set(report["facts"])


def test_cli_env_rejects_negative_workers_with_exit_2(capsys):
    assert main(["check", "env", "--num-workers", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "hangdoc: error: --num-workers must be 0 or more, got -1"


def test_check_env_without_num_workers_never_prints_an_empty_value(tmp_path):
    # GIVEN `check env` run without --num-workers
    import io

    from hangdoc.render.formats import render_check
    result = check_env(num_workers=None, probes=fake_host(tmp_path))
    # WHEN its text is printed
    out = io.StringIO()
    render_check(result, "text", out)
    # THEN the launch row says the workers were not given, never "num_workers=,"
    assert "num_workers=," not in out.getvalue()
    assert "num_workers=not given," in out.getvalue()
