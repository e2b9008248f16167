"""A bundle named with --out is always written, whatever the end, or a line says why (issue 45,
item 6): `run` of a command that fails at start (exit 4: "the report and the bundle", docs/ci.md),
`run` of one that passes, and a `watch` that ends with nothing found."""
from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from conftest import hangdoc_cmd

pytestmark = [pytest.mark.integration]

ENV = dict(os.environ, NO_COLOR="1", COLUMNS="120", GITHUB_STEP_SUMMARY="")


def hangdoc(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*hangdoc_cmd(), *args], capture_output=True, text=True, timeout=timeout, env=ENV)


@pytest.mark.timeout(90)
def test_run_of_a_command_that_fails_at_start_saves_the_bundle_it_names(tmp_path):
    # GIVEN a command that fails before any Python process could be watched
    out = tmp_path / "rf.json"
    # WHEN `hangdoc run --out` runs it
    done = hangdoc("run", "--no-gpu", "--out", str(out), "--", "bash", "-c", "echo starting; sleep 1; exit 1")
    # THEN exit 4 with the report, and the bundle written (it was not, and no line said so)
    assert done.returncode == 4 and "CRASH" in done.stdout, done.stderr[-2000:]
    assert out.exists(), done.stderr[-2000:]
    # AND the bundle replays: the same verdict, and the command's output kept
    replay = hangdoc("report", str(out), "--format", "json")
    assert replay.returncode == 4 and '"verdict": "crash"' in replay.stdout, replay.stderr[-2000:]


@pytest.mark.timeout(90)
def test_run_of_a_command_that_passes_saves_the_bundle_it_names(tmp_path):
    # GIVEN a Python command that ends well after a second
    out = tmp_path / "ok.json"
    # WHEN `hangdoc run --out` runs it
    done = hangdoc("run", "--no-gpu", "--interval", "0.5", "--out", str(out), "--",
                   sys.executable, "-c", "import time; time.sleep(1.5)")
    # THEN exit 0 and the named bundle written all the same
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.exists() and f"bundle saved to {out}" in done.stderr, done.stderr[-2000:]


@pytest.mark.timeout(90)
def test_watch_that_ends_with_nothing_found_saves_the_bundle_it_names(tmp_path):
    # GIVEN a lone Python process that sleeps, watched until --timeout finds nothing
    job = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
                           stdout=subprocess.PIPE, text=True)
    out = tmp_path / "w.json"
    try:
        job.stdout.readline()
        # WHEN `hangdoc watch --out` ends healthy
        done = hangdoc("watch", str(job.pid), "--single", "--no-gpu", "--interval", "0.5", "--hang-after", "60",
                       "--timeout", "3", "--out", str(out))
    finally:
        job.kill()
        job.wait()
    # THEN exit 0, and the bundle it was told to write is there (it wrote nothing and said nothing)
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.exists() and f"bundle saved to {out}" in done.stderr, done.stderr[-2000:]


@pytest.mark.timeout(90)
def test_run_whose_command_leaves_a_setsid_daemon_says_it_outlived_the_job(tmp_path):
    # GIVEN a command that starts a daemon in a session of its own and exits 0
    marker = f"hangdoc-daemon-{tmp_path.name}"
    script = (f"setsid {sys.executable} -c 'import time; time.sleep(300)' {marker} </dev/null >/dev/null 2>&1 & "
              "sleep 1.5; exit 0")
    try:
        # WHEN `hangdoc run` runs it
        done = hangdoc("run", "--no-gpu", "--interval", "0.5", "--", "bash", "-c", script)
        # THEN the command's own 0, and the report names the process that outlived it (nothing said before)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "outlived-job" in done.stdout and marker in done.stdout, done.stdout[-2000:]
    finally:
        for proc in psutil.process_iter(["cmdline"]):
            if marker in " ".join(proc.info["cmdline"] or ()):
                proc.kill()
