"""A healthy job whose DataLoader ends and forks its workers every epoch, watched to its end."""
from __future__ import annotations

import json

import pytest

from conftest import JOBS, replayed, run_hangdoc
from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@replayed("live-default-loader-workers-that-end-with-their-epoch-are-no-alarm")
def test_workers_that_end_with_their_epoch_are_no_alarm(tmp_path):
    # GIVEN a real 2-rank gloo DDP job with the DataLoader at its defaults (num_workers=2,
    # persistent_workers=False) and a validation loader, 8 epochs of about 4 s
    cmd = torchrun_cmd(JOBS / "default_loader_job.py", "--workdir", str(tmp_path), "--epochs", "8")
    job = start_job(cmd, cwd=tmp_path, log_path=tmp_path / "job.log")
    try:
        if not wait_for([tmp_path / "ready.0", tmp_path / "ready.1"], job, timeout=90):
            pytest.fail("job did not become ready: " + (tmp_path / "job.log").read_text(errors="replace")[-3000:])
        # WHEN hangdoc watches the launcher until the job ends
        done = run_hangdoc("watch", str(job.pid), "--format", "json", "--no-live", "--no-gpu",
                           "--timeout", "180", timeout=210)
    finally:
        stop_job(job)
    # THEN it ended well: exit 0, no critical finding, no worker in the report said to have died
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["verdict"] == "healthy", report["verdict"]
    assert not [f["title"] for f in report["findings"] if f["severity"] == "critical"]
    assert not any(f["rule"] == "worker-died" for f in report["findings"])
    # AND the workers that ended with their epoch or their validation pass are counted, not rows
    assert all(not r["workers"] for r in report["ranks"]), report["ranks"]
    assert all(r["retired_workers"] >= 4 for r in report["ranks"]), [r["retired_workers"] for r in report["ranks"]]
    for f in report["findings"]:
        if f["rule"] == "gpu-starved":
            assert any(e.startswith("2 DataLoader workers per rank") for e in f["evidence"]), f["evidence"]
