"""The order of a job's ending, on real gloo jobs of tests/jobs/leave_job.py: the rank that left
first is the culprit, not the first to print an error; a restart that failed is named by its own
failure; a restart that hangs in init_process_group names the rank that never reached the store."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import JOBS, Watch, hangdoc_cmd, recorded
from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no os.pidfd_open (Linux >= 5.3)")]


def leave_job(tmp_path: Path, mode: str, *extra: str, nproc: int = 3, restarts: bool = False) -> list[str]:
    rendezvous = ("--standalone", "--max-restarts=1") if restarts else ()
    return torchrun_cmd(JOBS / "leave_job.py", "--workdir", str(tmp_path), "--mode", mode, *extra, nproc=nproc,
                        extra=rendezvous)


def run(tmp_path: Path, job: list[str], *extra: str, timeout: float = 150):
    """`hangdoc run` over the job: (exit code, the JSON report, its stderr: the job's output and hangdoc's lines)."""
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    done = subprocess.run([*hangdoc_cmd(), *recorded("run"), "--no-gpu", "--no-live", "--interval", "0.5", "--format", "json",
                           "--out", str(tmp_path / "bundle.json"), *extra, "--", *job],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, report, done.stderr


def finding(report: dict, rule: str) -> dict:
    found = [f for f in report.get("findings", ()) if f["rule"] == rule]
    assert found, (rule, report.get("findings"))
    return found[0]


# How rank 2 left: its exit, or (its teardown still under way when the others failed) its sockets closing.
CLOSED = "closed its connections (its process still running)"


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode, exited", [("skip", "exited with code 0"), ("skip-fail", "exited with code 3")])
def test_a_rank_that_skipped_a_barrier_and_left_is_the_culprit_not_the_rank_that_failed_for_it(tmp_path, mode, exited):
    # GIVEN 3 gloo ranks where rank 2 skips the first of two barriers (pytorch/pytorch#138322) and
    # leaves: exiting 0 after its teardown, or exiting 3; ranks 0 and 1 then fail in their second
    # barrier with "Connection closed by peer"
    # WHEN it runs under `hangdoc run`
    rc, report, err = run(tmp_path, leave_job(tmp_path, mode, "--steps", "60"))
    # THEN a crash whose culprit is rank 2, the one that left first; the cause says so first
    assert (rc, report.get("verdict"), report.get("culprit_ranks")) == (4, "crash", [2]), err[-3000:]
    assert report["cause"][0].startswith((f"rank 2 left first: it {exited}", f"rank 2 left first: it {CLOSED}")), \
        report["cause"]
    assert "ranks 0-1 then failed because it left" in report["cause"][0], report["cause"]
    died = finding(report, "rank-died")
    assert died["ranks"] == [2] and died["title"].startswith("Rank 2 (pid "), died
    assert f"left first: it {exited}" in died["title"] or f"left first: it {CLOSED}" in died["title"], died
    # AND the peers' "Connection closed by peer" is matched to rank 2's socket where they printed it
    assert any("Connection closed by peer" in line and "rank 2's" in line for line in died["evidence"]), died
    # AND hangdoc does not claim to have ended a job that failed on its own
    assert "not by a failure of its own" not in err, err[-2000:]


@pytest.mark.timeout(200)
def test_a_rank_that_left_first_is_named_by_a_watch_from_the_launcher(tmp_path):
    # GIVEN the same job, its output in a file, watched from torchrun's pid once every rank stepped
    job = start_job(leave_job(tmp_path, "skip", "--steps", "160"), cwd=tmp_path, log_path=tmp_path / "job.log")
    watch = None
    try:
        if not wait_for([tmp_path / f"ready.{r}" for r in range(3)], job, timeout=120):
            pytest.fail("job did not become ready: " + (tmp_path / "job.log").read_text(errors="replace")[-3000:])
        # WHEN `hangdoc watch` is attached until the job ends
        watch = Watch(job.pid, tmp_path / "bundle.json", "--timeout", "120")
        rc, out, err = watch.finish(timeout=150)
        # THEN a crash, culprit rank 2, and the cause starts with its leaving
        report = json.loads(out)
        assert (rc, report["verdict"], report["culprit_ranks"]) == (4, "crash", [2]), err[-3000:]
        assert report["cause"][0].startswith("rank 2 left first: it "), report["cause"]
    finally:
        if watch is not None:
            watch.kill()
        stop_job(job)


@pytest.mark.timeout(240)
def test_a_restart_that_fails_in_init_is_named_by_its_own_failure_with_the_first_start_as_history(tmp_path):
    # GIVEN torchrun --max-restarts=1 whose rank 1 raises a transient error at step 20 of the first
    # start, and whose restarted rank 1 calls init_process_group against an address where nothing
    # listens: the restarted ranks fail in init_process_group
    # WHEN it runs under `hangdoc run`
    rc, report, err = run(tmp_path, leave_job(tmp_path, "init-fail", nproc=2, restarts=True))
    # THEN a crash named by the restart's own first failure, in init_process_group, its rank the culprit
    assert (rc, report.get("verdict")) == (4, "crash"), err[-3000:]
    cause = report["cause"]
    assert cause[0].startswith("restart 1 failed in init_process_group: rank "), cause
    assert report["culprit_ranks"] == [int(cause[0].split("rank ", 1)[1].split()[0])], (report["culprit_ranks"], cause)
    # AND the first start is history, with its own error
    assert any(line.startswith("before it, the first start failed: rank 1 ") and "transient read error" in line
               for line in cause), cause
    # AND whose making the restart's failure was: the launcher's (rank 0 handed the first start's
    # address of rank 1 by a store that kept it), or the job's own (rank 1's address of its own)
    assert any("the launcher's own making: " in line and "was rank 1's address in the first start" in line
               or line.strip().startswith("rank 1 tried 127.0.0.1:9, not the store its launcher named")
               for line in cause), cause
    assert "not by a failure of its own" not in err, err[-2000:]


@pytest.mark.timeout(240)
def test_a_restart_that_hangs_in_init_names_the_rank_that_never_reached_the_store(tmp_path):
    # GIVEN torchrun --max-restarts=1 whose rank 1 raises before init_process_group in the first
    # start, and in the restart waits in init_process_group on an address of its own for 15
    # minutes while rank 0 waits there on the launcher's store
    # WHEN it runs under `hangdoc run --hang-after 10`
    rc, report, err = run(tmp_path, leave_job(tmp_path, "init-hang", nproc=2, restarts=True), "--hang-after", "10",
                          "--timeout", "150", timeout=200)
    # THEN a hang whose culprit is rank 1: every rank is in init_process_group, but only rank 0 reached the store
    assert (rc, report.get("verdict"), report.get("culprit_ranks")) == (3, "hang", [1]), err[-3000:]
    missing = finding(report, "missing-ranks")
    assert missing["title"].startswith("Rank 1 of restart 1 never reached the store at "), missing
    assert any(line.startswith("rank 0 holds a connection to the store") for line in missing["evidence"]), missing
