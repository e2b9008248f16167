"""`hangdoc run -- CMD` on small commands: exit codes, JUnit, the GitHub step summary."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from xml.etree import ElementTree as ET

import pytest

from conftest import hangdoc_cmd, recorded

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def run(tmp_path, *cmd, extra=(), env=None):
    full_env = dict(os.environ, NO_COLOR="1")
    full_env.pop("GITHUB_STEP_SUMMARY", None)
    full_env.update(env or {})
    args = [*hangdoc_cmd(), *recorded("run"), "--no-gpu", "--interval", "0.5", "--hang-after", "3",
            "--out", str(tmp_path / "b.json"), "--junit", str(tmp_path / "junit.xml"), *extra, "--", *cmd]
    return subprocess.run(args, capture_output=True, text=True, timeout=80, env=full_env, cwd=tmp_path)


def junit_failures(tmp_path) -> int:
    return int(ET.parse(tmp_path / "junit.xml").getroot().get("failures"))


def test_command_that_succeeds_exits_0_and_streams_its_output(tmp_path):
    done = run(tmp_path, sys.executable, "-c", "print('step 1 loss 0.5')")
    assert done.returncode == 0, done.stderr
    assert "step 1 loss 0.5" in done.stdout
    assert junit_failures(tmp_path) == 0


def test_command_that_fails_exits_4_with_its_output_as_evidence(tmp_path):
    done = run(tmp_path, sys.executable, "-c", "import sys; print('CUDA error: boom'); sys.exit(1)")
    assert done.returncode == 4, done.stderr
    assert "CRASH" in done.stdout and "CUDA error: boom" in done.stdout
    assert junit_failures(tmp_path) == 1


def test_frozen_command_exits_3_is_killed_and_summarised(tmp_path):
    # GIVEN a command that sleeps forever and a GitHub step summary file
    summary = tmp_path / "summary.md"
    marker = tmp_path / "pid"
    code = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(1000)"
    # WHEN run under hangdoc with a short threshold
    done = run(tmp_path, sys.executable, "-c", code, env={"GITHUB_STEP_SUMMARY": str(summary)})
    # THEN exit 3, the report and bundle are there, and the command is gone
    assert done.returncode == 3, done.stdout + done.stderr
    assert "HANG" in done.stdout and (tmp_path / "b.json").exists()
    assert junit_failures(tmp_path) == 1
    assert summary.read_text().startswith("## hangdoc: HANG")
    pid = int(marker.read_text())
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_whole_run_timeout_fails_a_busy_command(tmp_path):
    # GIVEN a command that stays busy (never frozen) WHEN --timeout passes THEN exit 3, run-timeout
    done = run(tmp_path, sys.executable, "-c", "while True: sum(range(1000))",
               extra=("--timeout", "4", "--format", "json"))
    assert done.returncode == 3, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "hang" and report["findings"][0]["rule"] == "run-timeout"


def test_missing_command_is_a_usage_error(tmp_path):
    done = run(tmp_path, "/nonexistent/train")
    # (the report says so, and the bundle is saved whatever the end)
    assert done.returncode == 2 and "could not start" in done.stdout + done.stderr
    assert (tmp_path / "b.json").is_file()
