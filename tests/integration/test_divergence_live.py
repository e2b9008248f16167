"""Ranks that part ways in their own code, under `hangdoc run` with no flag: a real 2-rank DDP job
whose metrics gather sits in `try/except: continue`; rank 1's recall divides by zero, the handler
swallows it and rank 1 goes on to the next step while rank 0 waits in the gather. Before, two
ranks split this way were named by a preference for the training step's collective: rank 0."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import hangdoc_cmd, recorded
from hangdoc.scenarios.launch import torchrun_cmd

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

JOB = Path(__file__).resolve().parents[1] / "jobs" / "diverge_job.py"


def test_run_names_the_rank_whose_swallowed_exception_skipped_a_collective_and_the_handler(tmp_path):
    # GIVEN the job, started by hangdoc run (which ends it, pass or fail)
    cmd = torchrun_cmd(JOB, "--workdir", str(tmp_path), "--mode", "swallow")
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    env.pop("GITHUB_STEP_SUMMARY", None)
    # WHEN it hangs
    done = subprocess.run([*hangdoc_cmd(), *recorded("run"), "--no-gpu", "--out", str(tmp_path / "b.json"), "--", *cmd],
                          capture_output=True, text=True, timeout=140, env=env, cwd=tmp_path)
    # THEN the verdict names rank 1, the handler that swallowed the exception, and that cause's fix
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-2000:]
    assert "HANG: rank 1 is the culprit" in done.stdout
    assert "who left: rank 1 is ahead in the loop" in done.stdout
    assert "where the path left: diverge_job.py:" in done.stdout and "`except Exception:`" in done.stdout
    assert "An exception swallowed on one rank skipped a collective" in done.stdout
    assert "same number of batches" not in done.stdout
