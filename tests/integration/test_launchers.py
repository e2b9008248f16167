"""hangdoc on jobs as their launchers start and keep them: torch.multiprocessing.spawn (no
environment names a rank), torchrun's restarts (--max-restarts), and the launcher matrix
(tests/ordinary/matrix.py: LAUNCHER_CELLS, a healthy and a fault cell per launcher).

make test runs the cells that the issue's done-criteria name; the whole launcher matrix runs with
HANGDOC_LAUNCHER_MATRIX=1 (or `python tests/ordinary/matrix.py --launchers`). Every job is killed
whole when its test ends, pass or fail (ProcessTree: every process it ever had, every session).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import replayed
from ordinary.matrix import (FAULTS, HEALTHY, JOBS, LAUNCHER_CELLS, ProcessTree, _clean_environ, _Paths, _sweep,
                             _wait_for, attach_pid, hangdoc, job_env, launch, run_cell)

pytestmark = [pytest.mark.integration]


def cell(job: str, fault, mode: str, attach: str = "launcher"):
    missing = JOBS[job].missing()
    if missing:
        pytest.skip(f"{job} needs {', '.join(missing)}, which is not installed (pip install -e '.[test]')")
    result = run_cell(JOBS[job], fault, mode, attach=attach)
    if result.status != "OK" and JOBS[job].launcher == "elastic" and any(
            "init_process_group" in line or "connectFullMesh" in line
            for line in [*result.ranks, *result.job_log, *result.cause]):
        # torchrun's restarted ranks can fail to get through gloo's connect on a loaded machine (the
        # job's own failure or hang, which hangdoc reads as a hang or a crash of the new start, rightly):
        # not what this test is about. The report's cause says so where the log's tail no longer does.
        pytest.skip("the restarted ranks did not get through init_process_group:\n" + result.describe())
    if result.status == "INVALID":
        pytest.fail("the job itself did not do what the cell needs:\n" + result.describe())
    return result


def watch_json(pid: int, timeout_s: float, out: Path) -> tuple[int, dict]:
    done = subprocess.run([*hangdoc(), "watch", str(pid), "--format", "json", "--no-live", "--no-gpu",
                           "--out", str(out), "--timeout", str(timeout_s)],
                          capture_output=True, text=True, timeout=timeout_s + 60, env=_clean_environ())
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}


@pytest.mark.timeout(420)
def test_mp_spawn_hang_is_named_with_its_culprit_from_the_launcher_a_rank_and_a_worker():
    # GIVEN `python spawn_ddp.py`, whose mp.spawn starts two ranks that init_process_group with
    # tcp:// and rank=/world_size= arguments (no RANK in any environment), and whose rank 1's
    # DataLoader worker took a lock twice (the injector): rank 0 waits in a collective
    job = JOBS["spawn_tcp"]
    work = Path(tempfile.mkdtemp(prefix="hangdoc-launchers-spawn-"))
    paths = _Paths(work)
    env = dict(_clean_environ(), **job_env(FAULTS["worker_futex"], paths, sample=200))
    with open(paths.log, "wb") as log:
        launcher = subprocess.Popen(launch(job, paths.out), cwd=paths.out, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    tree = ProcessTree(launcher.pid)
    try:
        assert _wait_for(paths.record, launcher, time.monotonic() + 240), paths.log.read_text(errors="replace")[-3000:]
        time.sleep(2)
        pids = {"launcher": launcher.pid, "rank": attach_pid(launcher.pid, "rank", 1),
                "worker": attach_pid(launcher.pid, "worker", 1)}
        # WHEN hangdoc watch attaches to the launcher's pid, to a rank's and to a worker's
        for where, pid in pids.items():
            assert pid is not None, f"no {where} process under the launcher"
            code, report = watch_json(pid, 150, work / f"{where}.json")
            # THEN each names the hang (exit 3) and rank 1, the rank whose worker is stuck
            ranks = {r["rank"] for r in report.get("ranks", ())}
            assert (code, report.get("verdict"), report.get("culprit_ranks")) == (3, "hang", [1]), (where, report)
            assert ranks == {0, 1}, (where, report.get("ranks"))
            # and says where the ranks were read: no environment named them
            assert all(r.get("rank_source") for r in report["ranks"]), (where, report["ranks"])
    finally:
        tree.kill()
        launcher.wait()
        _sweep(work)
        shutil.rmtree(work, ignore_errors=True)


@replayed("golden-restart-recovered")
@pytest.mark.timeout(300)
def test_job_that_recovers_through_max_restarts_is_healthy_under_watch_with_the_restart_named():
    # GIVEN torchrun --max-restarts=2 (elastic: --nnodes=1:2, c10d rendezvous) over plain DDP whose
    # rank 1 raises once, in the first start only (the injector)
    # WHEN hangdoc watch attaches to torchrun before the failure and the job ends by itself
    result = cell("elastic_ddp", FAULTS["raise_once"], "watch")
    # THEN healthy, exit 0, and the warning names the restart: rank 1 first, its error, restart k of 2.
    # On a loaded machine one rank can be kept from a CPU for the whole restarted start: then the job
    # is slow, and hangdoc must say it is the machine's doing (the straggler waits for a CPU).
    if result.verdict == "slow" and any(f["rule"] == "slow-rank" and "waits for a CPU" in f["title"]
                                        for f in result.findings):
        assert result.exit_code == 8, result.describe()
    else:
        assert (result.exit_code, result.verdict, result.culprits) == (0, "healthy", []), result.describe()
    restarted = next(f for f in result.findings if f["rule"] == "workers-restarted")
    assert "of 2" in restarted["title"] and "first, rank 1" in restarted["title"], result.describe()
    assert any("RuntimeError" in line for line in restarted["evidence"]), result.describe()


@pytest.mark.timeout(300)
def test_job_that_recovers_through_max_restarts_exits_0_under_run():
    # GIVEN the same job under `hangdoc run`
    result = cell("elastic_ddp", FAULTS["raise_once"], "run")
    # THEN the run exits 0, healthy, the restart named
    assert (result.exit_code, result.verdict) == (0, "healthy"), result.describe()
    assert "workers-restarted" in result.rules and result.critical == [], result.describe()


@replayed("golden-restart-exhausted")
@pytest.mark.timeout(300)
def test_job_that_uses_up_its_restarts_is_a_crash_named_by_its_last_start_with_the_first_as_history():
    # GIVEN torchrun --max-restarts=2 whose rank 1 raises in every start
    # WHEN it runs under `hangdoc run`
    result = cell("elastic_ddp", FAULTS["raise_always"], "run")
    # THEN a crash (exit 4), the last start's failure first in the cause, its error said, the starts
    # before it listed, the first one rank 1's
    assert (result.exit_code, result.verdict) == (4, "crash"), result.describe()
    restarted = next(f for f in result.findings if f["rule"] == "workers-restarted")
    assert restarted["evidence"][0].startswith("the first start: rank 1"), result.describe()
    assert any("RuntimeError" in c for c in result.cause), result.describe()
    assert any(c.startswith("before it, the first start failed: rank 1 ") for c in result.cause), result.describe()
    if result.cause[0].startswith("restart 2 failed in init_process_group: rank "):
        # AND where torchrun's restart itself failed in gloo's connect (a store that handed the
        # restarted ranks restart 1's addresses, as it often does on a loaded machine), that start's
        # failing rank is the culprit, and the cause says whose making it was
        failed = int(result.cause[0].split("rank ", 1)[1].split()[0])
        assert result.culprits == [failed], result.describe()
        assert any("the launcher's own making: " in c for c in result.cause), result.describe()
    else:
        # AND otherwise rank 1, which raised again in the last start
        assert result.culprits == [1], result.describe()
        assert result.cause[0].startswith("restart 2 failed: rank 1 "), result.describe()


MATRIX = os.environ.get("HANGDOC_LAUNCHER_MATRIX") == "1"


@pytest.mark.skipif(not MATRIX, reason="the whole launcher matrix: HANGDOC_LAUNCHER_MATRIX=1 "
                                       "(or python tests/ordinary/matrix.py --launchers)")
@pytest.mark.timeout(600)
@pytest.mark.parametrize("job,fault,mode,attach", LAUNCHER_CELLS, ids=["-".join(c) for c in LAUNCHER_CELLS])
def test_launcher_matrix_cell(job, fault, mode, attach):
    # GIVEN a job under its launcher, healthy or with one injected fault
    # WHEN hangdoc watches it (from the launcher's pid, a rank's or a worker's) or runs it
    result = cell(job, HEALTHY if fault == "healthy" else FAULTS[fault], mode, attach)
    # THEN what it says matches the fault's ground truth
    assert result.ok, result.describe()
