"""Two outputs named as one file are refused before anything starts: exit 2, one line, no file
written and no command run (`--out X --junit X` had the JUnit XML where "bundle saved to X" said)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hangdoc.base.errors import HangdocError
from hangdoc.cli.common import distinct_outputs


def hangdoc(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangdoc", *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, NO_COLOR="1", **(env or {})))


@pytest.mark.parametrize("extra,env", [
    (["--junit", "X"], {}),
    (["--html", "X"], {}),
    ([], {"GITHUB_STEP_SUMMARY": "X"}),
    (["--junit", "sub/../X"], {}),
])
def test_run_refuses_two_outputs_on_one_path_before_the_command_starts(tmp_path, extra, env):
    # GIVEN run with the bundle and another output named as one file
    out = tmp_path / "X"
    marker = tmp_path / "ran"
    (tmp_path / "sub").mkdir()
    args = [str(tmp_path / a) if "X" in a else a for a in extra]
    env = {k: str(out) for k in env}
    # WHEN it is run
    done = hangdoc("run", "--out", str(out), *args, "--", "touch", str(marker), env=env)
    # THEN it exits 2 with one line, and neither the command ran nor a file was written
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "name one file" in done.stderr
    assert not marker.exists() and not out.exists()


def test_the_same_file_under_another_name_is_one_file(tmp_path):
    # GIVEN an existing file and a link to it
    real = tmp_path / "a.json"
    real.write_text("{}")
    (tmp_path / "b.json").symlink_to(real)
    # THEN they are refused as one, and distinct paths pass
    with pytest.raises(HangdocError, match="--out and --junit name one file"):
        distinct_outputs(out=real, junit=tmp_path / "b.json")
    distinct_outputs(out=real, junit=tmp_path / "c.xml", html=None, GITHUB_STEP_SUMMARY="")


def test_report_refuses_to_write_over_the_bundle_it_reads(tmp_path):
    with pytest.raises(HangdocError, match="BUNDLE and --output name one file"):
        distinct_outputs(BUNDLE=tmp_path / "b.json", output=tmp_path / "b.json")
