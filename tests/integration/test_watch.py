"""The watchdog on real stalled torchrun jobs: verdict, culprit, states, exit codes."""
from __future__ import annotations

import json

import pytest

from conftest import Watch, replayed, run_hangdoc
from hangdoc.analyze.past import CONFIRM_SAMPLES
from hangdoc.bundle.files import load_bundle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

FAST = ("--interval", "0.5", "--hang-after", "4", "--no-live", "--no-gpu", "--format", "json")


def watch(pid: int, tmp_path, *extra: str):
    out = tmp_path / "bundle.json"
    done = run_hangdoc("watch", str(pid), *FAST, "--out", str(out), *extra)
    report = json.loads(done.stdout) if done.stdout.strip() else None
    return done, report, out


def by_rank(report):
    return {r["rank"]: r for r in report["ranks"]}


def test_bz2_worker_stall_names_the_starved_rank(stall_job, tmp_path):
    # GIVEN rank 1's DataLoader workers spinning in bz2 decompression
    job = stall_job("bz2")
    # WHEN hangdoc watches the launcher
    done, report, out = watch(job.pid, tmp_path)
    # THEN: hang, exit 3, rank 1 is the culprit waiting on data (slowly: its workers move)
    assert done.returncode == 3, done.stderr
    assert report["schema"] == "hangdoc/report-v1" and report["verdict"] == "hang"
    assert report["culprit_ranks"] == [1]
    ranks = by_rank(report)
    assert ranks[1]["state"] == "dataloader-wait" and ranks[1]["progress"] == "slow"
    assert ranks[0]["state"] == "collective-wait" and "all_reduce" in ranks[0]["top_frame"]
    assert {w["state"] for w in ranks[1]["workers"]} == {"decompressing"}
    assert any(f["rule"] == "collective-straggler" and f["ranks"] == [1] for f in report["findings"])
    assert report["detected_after_s"] is not None and report["timeout_remaining_s"] > 0
    # and the saved bundle holds every sample and replays to the same verdict
    # (a wait older than --hang-after when the watch came is named once CONFIRM_SAMPLES agree: 3 or more)
    bundle = load_bundle(out)
    assert len(bundle.samples) == report["samples"] >= CONFIRM_SAMPLES
    replay = run_hangdoc("report", str(out), "--format", "json")
    assert replay.returncode == 3 and json.loads(replay.stdout)["culprit_ranks"] == [1]


@replayed("live-watch-rank-stuck-in-its-own-compute-is-the-culprit", "golden-compute-straggler")
def test_rank_stuck_in_its_own_compute_is_the_culprit(stall_job, tmp_path):
    # GIVEN rank 1 looping in heavy_compute while rank 0 waits in all_reduce
    job = stall_job("compute")
    # WHEN watched from rank 0's pid
    done, report, _ = watch(job.rank_pids()[0], tmp_path)
    # THEN rank 1 is named and its state is compute
    assert done.returncode == 3, done.stderr
    assert report["culprit_ranks"] == [1]
    assert by_rank(report)[1]["state"] == "compute"
    assert "heavy_compute" in json.dumps(report["findings"])


@replayed("live-watch-barrier-against-all-reduce-is-a-collective-mismatch", "golden-barrier-mismatch")
def test_barrier_against_all_reduce_is_a_collective_mismatch(stall_job, tmp_path):
    # GIVEN rank 1 in a barrier while rank 0 is in the step's all_reduce
    job = stall_job("mismatch")
    # WHEN watched
    done, report, _ = watch(job.pid, tmp_path)
    # THEN a collective-mismatch naming both ranks, rank 1 as the one who left
    assert done.returncode == 3, done.stderr
    mismatch = [f for f in report["findings"] if f["rule"] == "collective-mismatch"]
    assert mismatch and mismatch[0]["ranks"] == [0, 1]
    assert "barrier" in mismatch[0]["title"] and "all_reduce" in mismatch[0]["title"]
    assert report["culprit_ranks"] == [1]


@replayed("live-watch-slow-steps-are-not-a-hang", "slow-steps")
@pytest.mark.timeout(120)
def test_slow_steps_are_not_a_hang(stall_job, tmp_path):
    # GIVEN a healthy job whose steps take 2-3 s
    job = stall_job("slow", wait_fault=False)
    # WHEN watched for 3x hang-after
    done, report, out = watch(job.pid, tmp_path, "--timeout", "12")
    # THEN healthy, exit 0, no bundle needed
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["verdict"] == "healthy" and report["culprit_ranks"] == []
    assert not any(f["severity"] == "critical" for f in report["findings"])


def test_worker_segfault_is_a_crash_naming_the_rank(stall_job, tmp_path):
    # GIVEN a job whose rank-1 worker will die by SIGSEGV once the gate opens, watched from the start
    gate = tmp_path / "go"
    job = stall_job("segfault", "--gate", str(gate), wait_fault=False)
    watch = Watch(job.pid, tmp_path / "bundle.json", "--timeout", "60")
    try:
        watch.wait_for_samples(1)
        # WHEN the worker dies and torchrun ends the job
        gate.write_text("go")
        rc, stdout, stderr = watch.finish()
    finally:
        watch.kill()
    # THEN exit 4 and rank 1 is named
    assert rc == 4, stdout + stderr
    report = json.loads(stdout)
    assert report["verdict"] == "crash" and report["culprit_ranks"] == [1]


@replayed("live-watch-native-frames-leave-no-rank-without-a-stack-while-the-job-steps")
@pytest.mark.timeout(120)
def test_native_frames_leave_no_rank_without_a_stack_while_the_job_steps(stall_job, tmp_path):
    # GIVEN a healthy job that steps every 2-3 s (its stepping ranks are read without pausing them)
    job = stall_job("slow", wait_fault=False)
    # WHEN watched with --native
    done, report, _ = watch(job.pid, tmp_path, "--native", "--timeout", "10")
    # THEN every rank's stack was read, native frames included (py-spy refuses --native on an
    # unpaused read: the ranks read gently had no stack, and a stalled job was named wrongly)
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["missing_stacks"] == [], report["missing_stacks"]
    assert "native stack traces" not in done.stderr
