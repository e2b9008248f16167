"""hangdoc on ordinary training jobs (tests/ordinary): library defaults, quiet ends, injected faults.

A slice of the matrix that `python -m benchmarks.bench_matrix` runs in full: each test starts a
real torchrun job written the way users write them, lets hangdoc diagnose it and checks what
the user sees. The jobs know nothing of hangdoc; faults come from tests/ordinary/faults.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from ordinary.matrix import FAULTS, HEALTHY, INJECTOR, JOBS, CellResult, run_cell

pytestmark = [pytest.mark.integration]


def cell(job: str, fault, mode: str) -> CellResult:
    missing = JOBS[job].missing()
    if missing:
        pytest.skip(f"{job} needs {', '.join(missing)}, which is not installed (pip install -e '.[test]')")
    result = run_cell(JOBS[job], fault, mode)
    if result.status == "INVALID" and fault.healthy and forked_worker_stuck(result):
        # A worker forked while another thread of its rank held a lock waits in the fork's own
        # line for ever: the job's hang (seen once in a clean-clone run of the Lightning job),
        # which hangdoc names; not what a healthy cell is about.
        pytest.skip("the job's own DataLoader worker deadlocked as it was forked:\n" + result.describe())
    if result.status == "INVALID":
        pytest.fail("the job itself did not do what the cell needs:\n" + result.describe())
    return result


def forked_worker_stuck(result: CellResult) -> bool:
    """hangdoc named a worker deadlocked at the fork that made it (multiprocessing's popen_fork)."""
    return result.verdict == "hang" and any(f.get("rule") == "worker-deadlock" and "popen_fork.py" in f.get("title", "")
                                            for f in result.findings)


@pytest.mark.timeout(180)
def test_plain_ddp_with_dataloader_defaults_ends_healthy_under_run():
    # GIVEN a plain DDP job at DataLoader defaults (workers forked anew every epoch) that
    # prints nothing and ends well
    # WHEN it runs under `hangdoc run`
    result = cell("plain_ddp", HEALTHY, "run")
    # THEN exit 0, verdict healthy, and no critical finding about its workers coming and going
    assert result.exit_code == 0, result.describe()
    assert result.verdict == "healthy", result.describe()
    assert result.critical == [], result.describe()


@pytest.mark.timeout(240)
def test_lightning_job_watched_mid_run_is_healthy_when_it_ends():
    # GIVEN a PyTorch Lightning ddp job on CPU that has started training
    # WHEN `hangdoc watch` attaches to its torchrun launcher mid-run and the job ends by itself
    result = cell("lightning_ddp", HEALTHY, "watch")
    # THEN hangdoc exits 0 with verdict healthy and nothing critical
    assert (result.exit_code, result.verdict) == (0, "healthy"), result.describe()
    assert result.critical == [], result.describe()


@pytest.mark.timeout(240)
def test_lightning_job_with_a_rank_computing_longer_every_step_is_slow_with_its_straggler():
    # GIVEN a PyTorch Lightning ddp job whose rank 1 computes 0.3 s more before every optimizer
    # step from step 20 on (the injector): the job crawls, never stops
    # WHEN `hangdoc watch --timeout 40` attaches once it crawls
    result = cell("lightning_ddp", FAULTS["rank_slow"], "watch")
    # THEN slow (exit 8), rank 1 the straggler, slow-rank the finding, nothing critical
    assert (result.exit_code, result.verdict) == (8, "slow"), result.describe()
    assert result.culprits == [1] and "slow-rank" in result.rules, result.describe()
    assert result.critical == [], result.describe()


@pytest.mark.timeout(300)
def test_deadlocked_worker_in_plain_ddp_is_a_hang_of_its_rank():
    # GIVEN a plain DDP job whose rank-1 DataLoader worker took a lock twice (the injector)
    # WHEN `hangdoc watch` attaches after the deadlock began
    result = cell("plain_ddp", FAULTS["worker_futex"], "watch")
    # THEN a hang (exit 3) with rank 1 named and a data-side rule as the reason
    assert (result.exit_code, result.verdict) == (3, "hang"), result.describe()
    assert result.culprits == [1], result.describe()
    assert {"worker-deadlock", "dataloader-stall"} & set(result.rules), result.describe()


@pytest.mark.timeout(180)
def test_rank_killed_by_sigkill_is_a_crash_of_that_rank_with_its_cause():
    # GIVEN a plain DDP job whose rank 1 is SIGKILLed after 20 steps (the injector)
    # WHEN it runs under `hangdoc run`
    result = cell("plain_ddp", FAULTS["kill9"], "run")
    # THEN a crash (exit 4) with rank 1 as the culprit
    assert (result.exit_code, result.verdict) == (4, "crash"), result.describe()
    assert result.culprits == [1], result.describe()
    # and the report says how it died (torchrun printed "Signal 9 (SIGKILL) received")
    said = " ".join(result.cause + [f["title"] + " " + " ".join(f["evidence"]) for f in result.findings])
    assert "SIGKILL" in said or "signal 9" in said.lower(), result.describe()


# --- the injector itself, without torchrun ------------------------------------------------------

TINY_LOOP = ("import torch\n"
             "model = torch.nn.Linear(2, 1)\n"
             "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             "for step in range(5):\n"
             "    model(torch.ones(1, 2)).sum().backward()\n"
             "    opt.step()\n"
             "print('trained')\n")


def python_with_injector(tmp_path, code: str, **env: str) -> subprocess.CompletedProcess:
    variables = {k: v for k, v in os.environ.items() if not k.startswith("HANGDOC_FAULT") and k != "RANK"}
    variables.update(PYTHONPATH=str(INJECTOR), HANGDOC_FAULT_RECORD=str(tmp_path / "fault.json"), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=variables,
                          timeout=60, cwd=tmp_path)


@pytest.mark.timeout(90)
def test_injector_strikes_only_its_rank_and_never_breaks_the_script(tmp_path):
    # GIVEN the injector set to SIGKILL rank 0 after 2 optimizer steps
    # WHEN a training loop runs as rank 1, as a process without a rank, and with a fault it does not know
    elsewhere = python_with_injector(tmp_path, TINY_LOOP, HANGDOC_FAULT="kill9", HANGDOC_FAULT_RANK="0",
                                     HANGDOC_FAULT_STEP="2", RANK="1")
    launcher = python_with_injector(tmp_path, TINY_LOOP, HANGDOC_FAULT="kill9", HANGDOC_FAULT_RANK="0")
    unknown = python_with_injector(tmp_path, TINY_LOOP, HANGDOC_FAULT="no_such_fault", RANK="0")
    # THEN each trains to the end; the unknown fault costs one line on stderr
    for done in (elsewhere, launcher, unknown):
        assert done.returncode == 0 and "trained" in done.stdout, done.stderr
    assert "hangdoc fault injector: not installed" in unknown.stderr
    assert not (tmp_path / "fault.json").exists()


@pytest.mark.timeout(90)
def test_injector_kills_its_rank_at_the_step_and_records_it(tmp_path):
    # GIVEN the injector set to SIGKILL rank 0 after 2 optimizer steps
    # WHEN a training loop runs as rank 0
    done = python_with_injector(tmp_path, TINY_LOOP, HANGDOC_FAULT="kill9", HANGDOC_FAULT_RANK="0",
                                HANGDOC_FAULT_STEP="2", RANK="0")
    # THEN it dies by SIGKILL before the end, and the record says where
    assert done.returncode == -signal.SIGKILL and "trained" not in done.stdout
    record = json.loads((tmp_path / "fault.json").read_text())
    assert (record["kind"], record["rank"], record["step"]) == ("kill9", 0, 2)
