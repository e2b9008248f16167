"""A rank downloading its dataset while the others wait at a barrier is not hung: real torchrun jobs
whose rank 0 reads a slow HTTP download into memory (no CPU to speak of, and no byte of it counted
by /proc/PID/io, which counts read() and write(), not recv()). A watch attached while the others
have waited long is the case the past rule must not call hung; the same job whose server stops
sending is hung, and rank 0 is its culprit."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import JOBS, end_job, replayed, run_hangdoc
from hangdoc.scenarios.launch import start_job, torchrun_cmd, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


@pytest.fixture
def download_job(tmp_path):
    """GIVEN a trickling HTTP server outside the job and a real 2-rank job downloading from it."""
    started, servers = [], []

    def start(*server_args: str):
        port_file = tmp_path / "port"
        servers.append(subprocess.Popen([sys.executable, str(JOBS / "trickle_server.py"), str(port_file), *server_args],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        if not wait_for(port_file, timeout=30):
            pytest.fail("the test's HTTP server did not start")
        url = f"http://127.0.0.1:{port_file.read_text()}/shards.tar"
        job = start_job(torchrun_cmd(JOBS / "download_job.py", "--url", url, "--workdir", str(tmp_path)),
                        cwd=tmp_path, log_path=tmp_path / "job.log")
        started.append(job)
        if not wait_for([tmp_path / "ready.0", tmp_path / "ready.1"], job, timeout=60):
            pytest.fail("job did not reach its markers; log tail:\n" + (tmp_path / "job.log").read_text()[-3000:])
        job.refresh_tree()
        return job

    yield start
    for job in started:
        end_job(job)
    for server in servers:
        server.kill()
        server.wait(timeout=10)


def watch(pid: int, tmp_path, seconds: float) -> dict:
    done = run_hangdoc("watch", str(pid), "--format", "json", "--no-live", "--no-gpu", "--timeout", str(seconds),
                       "--out", str(tmp_path / "bundle.json"), timeout=seconds + 60)
    assert done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout)


@replayed("live-download-wait-a-rank-downloading-while-the-others-wait-at-a-barrier-is-not-hung")
def test_a_rank_downloading_while_the_others_wait_at_a_barrier_is_not_hung(download_job, tmp_path):
    # GIVEN rank 0 downloading for 60 s while rank 1 has waited at the barrier, watched from 4 s in
    job = download_job("--seconds", "60")
    time.sleep(4)      # the barrier's wait ages, as when a user attaches to a job that looks stuck
    # WHEN hangdoc watches it for 20 s, past the point where a wait that old with every other rank
    # asleep would be a hang
    report = watch(job.pid, tmp_path, 20)
    # THEN not a hang: rank 0's socket read woke again and again with data arriving
    assert report["verdict"] != "hang", [f["title"] for f in report["findings"]]
    threads = [w for w in report["threshold"]["witnesses"] if w["name"] == "main threads"]
    assert not threads or "rank 0 asleep" not in threads[0]["said"], threads


@replayed("live-download-wait-a-rank-whose-download-stopped-arriving-is-hung")
def test_a_rank_whose_download_stopped_arriving_is_hung(download_job, tmp_path):
    # GIVEN the same job, its server silent after the first chunk
    job = download_job("--stall")
    # WHEN hangdoc watches it
    report = watch(job.pid, tmp_path, 40)
    # THEN a hang, rank 0 the culprit, asleep in its socket read
    assert report["verdict"] == "hang" and report["culprit_ranks"] == [0], [f["title"] for f in report["findings"]]
