"""How a rank's exit is read, on real 2-rank torchrun jobs that hangdoc did not start: a rank
SIGKILLed while `hangdoc watch` is attached, and jobs that end well without a word."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from conftest import JOBS, Watch
from hangdoc.bundle.files import load_bundle
from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150),
              pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no os.pidfd_open (Linux >= 5.3)")]


def start(tmp_path: Path, mode: str, *extra: str, log: bool = True):
    """GIVEN a real 2-rank gloo job of tests/jobs/exit_job.py, ready (both ranks stepped); its output
    in a file, or (log=False) discarded, as output on a terminal is to hangdoc: nothing to read."""
    log_path = tmp_path / "job.log" if log else None
    job = start_job(torchrun_cmd(JOBS / "exit_job.py", "--workdir", str(tmp_path), "--mode", mode, *extra),
                    cwd=tmp_path, log_path=log_path)
    if not wait_for([tmp_path / "ready.0", tmp_path / "ready.1"], job, timeout=90):
        stop_job(job)
        pytest.fail("job did not become ready" + (": " + log_path.read_text(errors="replace")[-3000:] if log else ""))
    return job


def test_a_rank_killed_by_sigkill_while_watched_is_the_crash_with_its_signal(tmp_path):
    job = start(tmp_path, "forever")
    watch = Watch(job.pid, tmp_path / "bundle.json")
    try:
        watch.wait_for_samples(2)
        # WHEN rank 1 is SIGKILLed while `hangdoc watch` is attached to the launcher
        rank1 = int((tmp_path / "ready.1").read_text())
        os.kill(rank1, signal.SIGKILL)
        rc, out, err = watch.finish()
        # THEN exit 4, rank 1 the culprit, rank-died saying SIGKILL, read from the zombie
        assert rc == 4, err
        report = json.loads(out)
        assert report["verdict"] == "crash" and report["culprit_ranks"] == [1], err
        died = [f for f in report["findings"] if f["rule"] == "rank-died"]
        assert died and died[0]["ranks"] == [1] and "SIGKILL" in died[0]["title"], report["findings"]
        record = load_bundle(tmp_path / "bundle.json").exit_of(rank1)
        assert (record.signal, record.source) == (signal.SIGKILL, "zombie"), record
    finally:
        watch.kill()
        stop_job(job)


@pytest.mark.parametrize("mode, extra", [("quiet", ("--steps", "120")),
                                         ("ragged", ("--steps", "100", "--linger", "6"))])
def test_a_job_that_ends_well_without_a_word_is_healthy(tmp_path, mode, extra):
    # GIVEN a job that says nothing hangdoc can read (its output discarded) and ends well: both
    # ranks together, or rank 1 leaving 6 s after rank 0 (a ragged teardown)
    job = start(tmp_path, mode, *extra, log=False)
    watch = Watch(job.pid, tmp_path / "bundle.json", "--timeout", "60")
    try:
        # WHEN `hangdoc watch` is attached until it ends
        rc, out, err = watch.finish(timeout=90)
        # THEN healthy, exit 0: every rank's exit 0 was read as it died
        report = json.loads(out)
        assert (rc, report["verdict"]) == (0, "healthy"), err
        assert not [f for f in report["findings"] if f["severity"] == "critical"]
        assert "the job ended" in err, err
    finally:
        watch.kill()
        stop_job(job)
