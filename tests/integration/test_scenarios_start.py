"""The scenario zoo's hangs and crashes reach their fault on time, and leave nothing behind.

Real `torchrun --nproc_per_node=2` jobs on gloo, one per scenario, sized for a 2-core machine.
The jobs that end by themselves (healthy, slow) are run to their end under `hangdoc run` by
test_zoo.py, which checks that they trained on every rank, marked no fault and said "done".
Each hang's job is the one its replay-tier recording was made from (tests/replay_record.py keeps a
recording only when the job reached its fault): they start here with HANGDOC_LIVE_ZOO=1 (`make
zoo`), the crash always.
"""
from __future__ import annotations

import os
import time

import psutil
import pytest

from hangdoc.scenarios import SCENARIOS, VERDICTS
from hangdoc.scenarios.launch import RunningJob, start_job, stop_job, wait_for

pytestmark = pytest.mark.integration

FAULT_WITHIN_S = 45.0       # from start to the fault marker: start-up plus up to ~12 s of paced healthy steps

HANGS = [name for name, s in SCENARIOS.items() if s.verdict == "hang"]
EVERY = os.environ.get("HANGDOC_LIVE_ZOO") == "1"
CRASHES = [name for name, s in SCENARIOS.items() if s.verdict == "crash"]


def log_tail(job: RunningJob, chars: int = 3000) -> str:
    return job.log_path.read_bytes().decode(errors="replace")[-chars:] if job.log_path else ""


def survivors(job: RunningJob) -> list[int]:
    """Processes of the job still alive: any it was seen with, any left in its sessions."""
    sessions = (job.sessions | {job.pid}) - {os.getsid(0)}
    alive = []
    for proc in psutil.process_iter():
        try:
            seen = job.procs.get(proc.pid)
            ours = (seen is not None and seen.is_running()) or os.getsid(proc.pid) in sessions
            if ours and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return alive


def wait_exit(job: RunningJob, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_tree()
        if job.popen.poll() is not None:
            return job.popen.returncode
        time.sleep(0.05)
    return None


@pytest.fixture
def workdir(tmp_path):
    yield tmp_path
    for shard in (tmp_path / "data").glob("*.tar*"):    # the bz2 scenarios write ~100 MB
        shard.unlink()


def test_every_scenario_states_its_ground_truth():
    for name, scenario in SCENARIOS.items():
        assert scenario.name == name
        assert scenario.verdict in VERDICTS
        # a culprit for every verdict but healthy and a data-bound slow job (every rank waits on its data)
        data_bound = scenario.verdict == "slow" and scenario.expected_rule == "gpu-starved"
        assert bool(scenario.culprit_ranks) == (scenario.verdict != "healthy" and not data_bound), name
        assert all(0 <= r < scenario.nproc for r in scenario.culprit_ranks), name
        assert scenario.description and "\n" not in scenario.description


@pytest.mark.timeout(90)
@pytest.mark.skipif(not EVERY, reason="each hang's job is the replay tier's recording's; live with HANGDOC_LIVE_ZOO=1")
@pytest.mark.parametrize("name", HANGS)
def test_hang_scenario_reaches_its_fault_and_stays_stuck(name, workdir):
    # GIVEN the scenario's data
    scenario = SCENARIOS[name]
    scenario.prepare(workdir)
    # WHEN its job starts
    job = start_job(scenario.command(workdir), log_path=workdir / "job.log")
    try:
        # THEN the culprit marks the fault after both ranks have trained for a while
        assert wait_for(scenario.fault_marker(workdir), job, timeout=FAULT_WITHIN_S), log_tail(job)
        fault = scenario.read_fault(workdir)
        assert fault["rank"] in scenario.culprit_ranks
        assert wait_for(scenario.ready_markers(workdir), job, timeout=10), log_tail(job)
        # AND the job neither finishes nor crashes: it hangs
        time.sleep(2.0)
        job.refresh_tree()
        assert job.popen.poll() is None, log_tail(job)
        assert len(job.rank_pids()) == scenario.nproc
    finally:
        stop_job(job)
    assert survivors(job) == []


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", CRASHES)
def test_crash_scenario_kills_a_worker_and_the_job(name, workdir):
    # GIVEN the scenario's data
    scenario = SCENARIOS[name]
    scenario.prepare(workdir)
    # WHEN its job starts
    job = start_job(scenario.command(workdir), log_path=workdir / "job.log")
    try:
        # THEN a worker marks the fault, the job exits non-zero and PyTorch names the signal
        assert wait_for(scenario.fault_marker(workdir), job, timeout=FAULT_WITHIN_S), log_tail(job)
        assert scenario.read_fault(workdir)["rank"] in scenario.culprit_ranks
        returncode = wait_exit(job, timeout=30)
        assert returncode not in (None, 0), log_tail(job)
        # PyTorch names it in one of two ways: the rank's "killed by signal" line, or, when the worker
        # died while handing over a batch (the rank then fails with ConnectionResetError), the
        # worker's own "Unexpected segmentation fault encountered in worker" line.
        output = log_tail(job, 100_000)
        assert ("is killed by signal: Segmentation fault" in output
                or "Unexpected segmentation fault encountered in worker" in output), output[-3000:]
    finally:
        stop_job(job)
    assert survivors(job) == []
