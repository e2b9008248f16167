"""Shared fixtures: real torchrun jobs that signal readiness and are always killed."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

JOBS = Path(__file__).parent / "jobs"

PLANTED_SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "HF_TOKEN": "hf_PlantedTokenAbcdefGhijkLmnop1234",
    "DB_PASSWORD": "correct-horse-battery-staple-42",
    "TORCH_HUB_TOKEN": "PlantedHubSecretValue9876",
}
CMDLINE_SECRET = "hf_CmdlineTokenQrstuVwxyz5678Abcd"


@pytest.fixture
def probe_job(tmp_path):
    """GIVEN a real 2-rank gloo torchrun job, 2 DataLoader workers per rank, secrets in its env."""
    started = []

    def start(*extra: str):
        data = tmp_path / "data.bin"
        with open(data, "wb") as f:
            f.truncate(64 << 20)
        cmd = torchrun_cmd(JOBS / "probe_job.py", "--workdir", str(tmp_path), "--data", str(data),
                           "--hf-token", CMDLINE_SECRET, *extra)
        job = start_job(cmd, cwd=tmp_path, env=PLANTED_SECRETS, log_path=tmp_path / "job.log")
        started.append(job)
        ready = [tmp_path / "ready.0", tmp_path / "ready.1"]
        if not wait_for(ready, job, timeout=60):
            log = (tmp_path / "job.log").read_text(errors="replace")[-3000:]
            pytest.fail(f"job did not become ready; log tail:\n{log}")
        job.refresh_tree()
        return job

    yield start
    for job in started:
        stop_job(job)


def hangdoc_cmd() -> list[str]:
    return [sys.executable, "-m", "hangdoc"]


@pytest.fixture
def stall_job(tmp_path):
    """GIVEN a real 2-rank gloo job that stalls in the chosen --mode (tests/jobs/stall_job.py)."""
    started = []

    def start(mode: str, *extra: str, wait_fault: bool = True):
        cmd = torchrun_cmd(JOBS / "stall_job.py", "--workdir", str(tmp_path), "--mode", mode, *extra)
        job = start_job(cmd, cwd=tmp_path, log_path=tmp_path / "job.log")
        started.append(job)
        markers = [tmp_path / "ready.0", tmp_path / "ready.1"] + ([tmp_path / "fault"] if wait_fault else [])
        if not wait_for(markers, job, timeout=60):
            log = (tmp_path / "job.log").read_text(errors="replace")[-3000:]
            pytest.fail(f"job did not reach its markers; log tail:\n{log}")
        return job

    yield start
    for job in started:
        stop_job(job)


def run_hangdoc(*args: str, timeout: float = 120) -> "subprocess.CompletedProcess":
    import subprocess

    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    return subprocess.run([*hangdoc_cmd(), *args], capture_output=True, text=True, timeout=timeout, env=env)


FAKE_NVML_SOURCE = Path(__file__).resolve().parent / "fakenvml" / "fake_nvml.c"


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/fakenvml/fake_nvml.c built into a shared library, once per session.

    Point $FAKE_NVML_CONFIG at a config file before nvmlInit to say which GPUs it reports.
    """
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed, so the fake NVML library cannot be built")
    library = tmp_path_factory.mktemp("fakenvml") / "libfake_nvml.so"
    build = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(library), str(FAKE_NVML_SOURCE)],
        capture_output=True, text=True,
    )
    if build.returncode != 0:
        pytest.fail(f"could not build the fake NVML library:\n{build.stderr}")
    return library
