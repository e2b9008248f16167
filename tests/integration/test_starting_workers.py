"""A watch that attaches while a rank's DataLoader workers are still starting (forked, their
target not yet called) reports them once they run: a worker read too early is not taken for
some other child for good (issue 37, item 4)."""
from __future__ import annotations

import json
import sys
import time

import pytest

from conftest import JOBS, replayed, run_hangdoc
from hangdoc.scenarios.launch import start_job, stop_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@replayed("live-starting-workers-workers-caught-before-they-run-are-reported-once-they-do")
def test_workers_caught_before_they_run_are_reported_once_they_do(tmp_path):
    # GIVEN a rank whose 2 DataLoader workers sleep 6 s between their fork and their worker loop
    cmd = [sys.executable, str(JOBS / "slow_start_job.py"), "--workdir", str(tmp_path), "--start-s", "6"]
    job = start_job(cmd, cwd=tmp_path, env={"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"},
                    log_path=tmp_path / "job.log")
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("forked.*"))) < 2 and job.popen.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = sorted(int(p.name.split(".")[1]) for p in tmp_path.glob("forked.*"))
        assert len(workers) == 2, "the workers did not start; log tail:\n" + (tmp_path / "job.log").read_text()[-3000:]
        # WHEN hangdoc watches the rank at once, while both workers still sleep in their fork
        done = run_hangdoc("watch", str(job.popen.pid), "--format", "json", "--no-live", "--no-gpu",
                           "--interval", "1", "--timeout", "12", "--out", str(tmp_path / "b.json"), timeout=90)
        # THEN both workers are in the report, each with its index, once they run
        assert done.returncode in (0, 7), done.stderr[-2000:]
        report = json.loads(done.stdout)
        shown = sorted((w["pid"], w["index"]) for r in report["ranks"] for w in r["workers"])
        assert [pid for pid, _ in shown] == workers and sorted(i for _, i in shown) == [0, 1], shown
    finally:
        stop_job(job)
