"""Fixtures for the unit tests."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

FAKE_NVML_SOURCE = Path(__file__).resolve().parents[1] / "fakenvml" / "fake_nvml.c"


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
