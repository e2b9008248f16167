"""`hangdoc run` on a hung torchrun job: once hangdoc ends the job, torchrun's SignalException
traceback (its launcher reporting hangdoc's SIGTERM) is not echoed into the CI log as if it were
the job's failure, nor taken into the report; one line says hangdoc ended the job (issue 37, item 6)."""
from __future__ import annotations

import json
import os
import signal
import subprocess

import psutil
import pytest

from conftest import JOBS, hangdoc_cmd, recorded
from hangdoc.scenarios.launch import torchrun_cmd

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def _end_leftovers(marker: str) -> list[psutil.Process]:
    """Every process whose command line names this test's own directory, ended; those found alive."""
    left = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in " ".join(proc.info["cmdline"] or ()) and proc.pid != os.getpid():
            left.append(proc)
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
    return [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_hung_job_ended_by_hangdoc_leaves_no_signal_exception_in_the_log_or_the_report(tmp_path):
    # GIVEN a 2-rank torchrun job whose rank 1 loops in its own compute while rank 0 waits in all_reduce
    job = torchrun_cmd(JOBS / "stall_job.py", "--workdir", str(tmp_path), "--mode", "compute")
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    env.pop("GITHUB_STEP_SUMMARY", None)
    try:
        # WHEN `hangdoc run` watches it, names the hang and ends it
        done = subprocess.run([*hangdoc_cmd(), *recorded("run"), "--no-gpu", "--no-live", "--interval", "0.5", "--hang-after", "4",
                               "--timeout", "90", "--format", "json", "--out", str(tmp_path / "b.json"),
                               "--junit", str(tmp_path / "junit.xml"), "--", *job],
                              capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    finally:
        left = _end_leftovers(str(tmp_path))
    assert not left, f"processes of the job outlived the run: {left}"
    assert done.returncode == 3, done.stderr[-3000:]
    # THEN the job's output (stderr, beside the JSON report) has no teardown traceback, and says who ended it
    log = done.stderr
    assert "api.SignalException" not in log and "Traceback (most recent call last)" not in log, log[-3000:]
    ended = [line for line in log.splitlines() if "ended by hangdoc" in line]
    assert len(ended) == 1 and ended[0].startswith("hangdoc: the job was ended by hangdoc, not by a failure of its own; "
                                                   "its launcher's SignalException traceback ("), ended
    # AND the report, the bundle's output tail and the JUnit result never name it
    report = json.loads(done.stdout)
    assert report["verdict"] == "hang" and report["culprit_ranks"] == [1]
    for text in (done.stdout, (tmp_path / "b.json").read_text(), (tmp_path / "junit.xml").read_text()):
        assert "SignalException" not in text
