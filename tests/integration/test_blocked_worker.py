"""A DataLoader worker blocked opening a shard on a dead mount (a FIFO no one writes: open() blocks
in the kernel the same way), on a real torchrun job: named blocked opening its path, one clock in
the report, and a second watch not fooled by the first one's stack reads."""
from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from conftest import JOBS, replayed, run_hangdoc
from hangdoc.scenarios.data import make_shards, write_list
from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def stuck_open_job(tmp_path):
    """GIVEN a real 2-rank gloo job whose rank-1 worker 0 blocks in open() of WORKDIR/mnt/shard-dead.tar;
    the whole job is ended whatever happens."""
    listing = write_list(make_shards(tmp_path / "data", 4, 24, 1.0, prefix="aishell"), tmp_path / "data.list")
    cmd = torchrun_cmd(JOBS / "rules_job.py", "--workdir", str(tmp_path), "--mode", "stuck-open",
                       "--data-list", str(listing), "--fault-after", "4")
    job = start_job(cmd, cwd=tmp_path, log_path=tmp_path / "job.log")
    try:
        if not wait_for([tmp_path / "ready.0", tmp_path / "ready.1", tmp_path / "fault"], job, timeout=90):
            pytest.fail("job did not reach its markers; log tail:\n" + (tmp_path / "job.log").read_text()[-3000:])
        yield job, float((tmp_path / "fault").read_text().split()[0])
    finally:
        stop_job(job)
    left = [p for p in job.procs.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes of the job outlived it: {left}"


def watch(pid: int, out: Path, *extra: str) -> dict:
    done = run_hangdoc("watch", str(pid), "--format", "json", "--no-live", "--no-gpu", "--out", str(out), *extra,
                       timeout=90)
    assert done.returncode == 3, done.stderr[-2000:]
    return json.loads(done.stdout)


@replayed("live-blocked-worker-a-worker-blocked-opening-a-dead-shard-is-named-and-timed-on-one-clock")
def test_a_worker_blocked_opening_a_dead_shard_is_named_and_timed_on_one_clock(stuck_open_job, tmp_path):
    job, fault_at = stuck_open_job
    dead = str(tmp_path / "mnt" / "shard-dead.tar")
    # WHEN hangdoc watches it
    report = watch(job.pid, tmp_path / "first.json", "--hang-after", "6", "--html", str(tmp_path / "first.html"))
    # THEN rank 1 is the culprit and its worker 0 is blocked opening the path, timed, not "idle"
    assert report["verdict"] == "hang" and report["culprit_ranks"] == [1]
    stall = next(f for f in report["findings"] if f["rule"] == "dataloader-stall")
    assert f"worker 0 blocked opening {dead} for " in stall["title"], stall["title"]
    assert any("syscall" in e and "(openat)" in e for e in stall["evidence"]), stall["evidence"]
    rank1 = next(r for r in report["ranks"] if r["rank"] == 1)
    assert any(w["state"] == "blocked" for w in rank1["workers"]), rank1["workers"]
    # AND the HTML draws the worker's wait as blocked, not asleep
    page = (tmp_path / "first.html").read_text()
    assert 'url(#p-blocked)' in page or 'p-blocked' in page.split("</defs>", 1)[1], "no blocked span on the page"
    # AND every "for N s" of a stuck rank agrees with the header's figure (one clock)
    stuck = [r["waiting_s"] for r in report["ranks"]]
    assert max(stuck) - min(stuck) <= 1.0 and abs(max(stuck) - report["detected_after_s"]) <= 1.0, \
        (stuck, report["detected_after_s"])

    # GIVEN the job left hung a while longer after that watch's blocking stack reads
    time.sleep(12)
    # WHEN a second watch attaches, with no flag
    attached = time.time()
    again = watch(job.pid, tmp_path / "second.json")
    # THEN it dates the stall from the job's own wait, not from the first watch's last read
    hung_for = attached - fault_at
    assert again["verdict"] == "hang" and again["culprit_ranks"] == [1]
    assert again["detected_after_s"] >= hung_for - 3.0, (again["detected_after_s"], hung_for)
    assert again["before"]["waited_s"] >= hung_for - 4.0, (again["before"], hung_for)
