"""A rank that never reaches init_process_group, watched live: the others wait there for it."""
from __future__ import annotations

import json

import pytest

from conftest import JOBS, replayed, run_hangdoc
from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


@replayed("live-rendezvous-live-a-rank-polling-a-stale-lock-before-init-is-the-culprit-of-the-ranks-in-ini")
def test_a_rank_polling_a_stale_lock_before_init_is_the_culprit_of_the_ranks_in_init(tmp_path):
    # GIVEN a real 3-rank gloo job: rank 1 retries a stale lock file forever (counting its attempts,
    # sleeping between them) before init_process_group; ranks 0 and 2 wait in init_process_group
    cmd = torchrun_cmd(JOBS / "rendezvous_job.py", "--workdir", str(tmp_path), nproc=3)
    job = start_job(cmd, cwd=tmp_path, log_path=tmp_path / "job.log")
    out = tmp_path / "bundle.json"
    try:
        if not wait_for([tmp_path / f"ready.{r}" for r in range(3)], job, timeout=60):
            log = (tmp_path / "job.log").read_text(errors="replace")[-3000:]
            pytest.fail(f"job did not become ready; log tail:\n{log}")
        # WHEN hangdoc watches the torchrun launcher with --hang-after 10
        done = run_hangdoc("watch", str(job.pid), "--format", "json", "--no-live", "--no-gpu", "--hang-after", "10",
                           "--out", str(out), timeout=120)
    finally:
        stop_job(job)
    # THEN a hang (exit 3) with rank 1 the culprit: its poll loop was no progress
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["verdict"] == "hang" and report["culprit_ranks"] == [1]
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert ranks[1]["progress"] == "stuck" and ranks[1]["top_frame"].startswith("acquire_lock (rendezvous_job.py:")
    assert ranks[0]["top_frame"].startswith("init_process_group (")
    # AND the finding names rank 1's own line, what the others wait in, and the stale lock
    found = [f for f in report["findings"] if f["rule"] == "missing-ranks" and f["ranks"] == [1]]
    assert found and found[0]["severity"] == "critical"
    assert "Rank 1 never reached init_process_group" in found[0]["title"]
    assert "acquire_lock (rendezvous_job.py:" in found[0]["title"]
    assert any("wait in init_process_group" in e for e in found[0]["evidence"])
    assert "stale lock" in found[0]["fix"]
    # AND the saved bundle replays to the same verdict
    replay = run_hangdoc("report", str(out), "--format", "json")
    assert replay.returncode == 3 and json.loads(replay.stdout)["culprit_ranks"] == [1]
