"""Ranks a launcher runs under wrappers (a shell, `timeout`, conda's `run`, a `tee` pipeline): the rank
is the Python process below them, found from the launcher's pid, the wrapper's or the rank's, on a
fake /proc tree; the wrapper is kept as the rank's parent and shown in the report."""
from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from test_merge_jobs import FakeProc

from hangdoc.base.errors import NotDistributed
from hangdoc.bundle.files import load_bundle, save_bundle
from hangdoc.collect.discover import find_job
from hangdoc.collect.jobs import list_jobs
from hangdoc.collect.procfs import ProcFS
from hangdoc.live.attach import find_job_waiting
from hangdoc.model import Role, Wrapper
from hangdoc.render.text import render_text
from hangdoc.report.judge import judge

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

TORCHRUN = ("/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc_per_node=2", "--no-python", "bash", "wrap.sh")
TRAIN = ("/usr/bin/python3", "-u", "train.py")
BASH = ("bash", "wrap.sh")


def rank_env(rank: int, size: int = 2) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "wrapped"}


@pytest.fixture
def wrapped(tmp_path):
    """`torchrun --no-python bash wrap.sh`: each rank a shell running `python train.py`, with a worker."""
    proc = FakeProc(tmp_path)
    proc.add(100, 1, TORCHRUN)
    for rank, shell in enumerate((110, 120)):
        proc.add(shell, 100, BASH, rank_env(rank))
        proc.add(shell + 1, shell, TRAIN, rank_env(rank))
        proc.add(shell + 2, shell + 1, TRAIN, rank_env(rank))    # its forked DataLoader worker
    return proc


@pytest.mark.parametrize("pid", [100, 110, 121, 122], ids=["launcher", "wrapper", "rank", "worker"])
def test_a_rank_behind_a_shell_is_its_python_process_from_any_pid(wrapped, pid):
    # WHEN the job is looked for from the launcher's, a wrapper's, a rank's or a worker's pid
    job = find_job(pid, ProcFS(wrapped.root))
    # THEN the ranks are the Python processes, each with its shell as its parent; the shells are no ranks
    assert job.launcher_pid == 100 and job.world_size == 2
    assert [(r.pid, r.rank, r.ppid) for r in job.ranks] == [(111, 0, 110), (121, 1, 120)]
    assert [r.wrappers for r in job.ranks] == [(Wrapper(110, BASH),), (Wrapper(120, BASH),)]
    assert {p.pid for p in job.by_role(Role.WORKER)} == {112, 122}
    assert not {110, 120} & {p.pid for p in job.processes}


def test_env_then_timeout_is_walked_through_to_python(tmp_path):
    # GIVEN `env RANK=0 ... timeout 3600 python train.py` started from a shell: env exec'd timeout,
    # which runs python as its child
    proc = FakeProc(tmp_path)
    proc.add(200, 1, ("-bash",))
    proc.add(210, 200, ("timeout", "3600", "python", "train.py"), rank_env(0, 1))
    proc.add(211, 210, ("python", "train.py"), rank_env(0, 1))
    # WHEN the job is looked for from timeout's pid, or python's
    for pid in (210, 211):
        job = find_job(pid, ProcFS(tmp_path))
        # THEN python is the rank, timeout its wrapper
        assert [(r.pid, r.rank, r.wrappers) for r in job.ranks] == [
            (211, 0, (Wrapper(210, ("timeout", "3600", "python", "train.py")),))]


def test_srun_bash_wrap_sh_under_slurms_step_daemon(tmp_path):
    # GIVEN `srun --mpi=pmi2 bash wrap.sh`: slurmstepd runs one shell per task, PMI_RANK in its environment
    proc = FakeProc(tmp_path)
    proc.add(500, 1, ("slurmstepd: [4242.0]",))
    for rank, shell in enumerate((510, 520)):
        env = {"PMI_RANK": str(rank), "PMI_SIZE": "2", "SLURM_PROCID": str(rank)}
        proc.add(shell, 500, BASH, env)
        proc.add(shell + 1, shell, TRAIN, env)
    # WHEN the job is found from the step daemon's pid
    job = find_job(500, ProcFS(tmp_path))
    # THEN the ranks are the Python processes below the shells
    assert [(r.pid, r.rank, r.ppid) for r in job.ranks] == [(511, 0, 510), (521, 1, 520)]
    assert job.launcher_pid == 500


def test_conda_run_and_a_tee_pipeline_are_walked_through(tmp_path):
    # GIVEN torchrun --no-python running `conda run -n env bash -c 'python train.py | tee log'`:
    # conda (a Python program) runs a shell, which runs python and tee
    proc = FakeProc(tmp_path)
    conda = ("/opt/conda/bin/python", "/opt/conda/bin/conda", "run", "-n", "env", "bash", "-c", "...")
    proc.add(300, 1, TORCHRUN)
    for rank, top in enumerate((310, 320)):
        proc.add(top, 300, conda, rank_env(rank))
        proc.add(top + 1, top, ("/bin/bash", "-c", "python train.py | tee log"), rank_env(rank))
        proc.add(top + 2, top + 1, TRAIN, rank_env(rank))
        proc.add(top + 3, top + 1, ("tee", "log"), rank_env(rank))
    # WHEN the job is found from the launcher
    job = find_job(300, ProcFS(tmp_path))
    # THEN each rank is the Python process below conda and the shell; tee is no rank
    assert [(r.pid, r.rank) for r in job.ranks] == [(312, 0), (322, 1)]
    assert [w.pid for w in job.ranks[0].wrappers] == [310, 311]
    assert 313 not in {p.pid for p in job.processes}


def test_a_wrapper_whose_python_has_not_started_is_no_rank_and_is_read_again(tmp_path):
    # GIVEN torchrun whose ranks' shells have not started python yet
    proc = FakeProc(tmp_path)
    proc.add(400, 1, TORCHRUN)
    proc.add(410, 400, BASH, rank_env(0))
    proc.add(420, 400, BASH, rank_env(1))
    procfs = ProcFS(tmp_path)
    # WHEN the job is looked for, from the launcher or a wrapper THEN there is no rank yet (no shell taken for one)
    for pid in (400, 410):
        with pytest.raises(NotDistributed):
            find_job(pid, procfs)
    assert list_jobs(procfs) == []
    # WHEN a watch waits on the wrapper and its Python starts meanwhile
    waits = []

    def python_starts(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            proc.add(411, 410, TRAIN, rank_env(0))
            proc.add(421, 420, TRAIN, rank_env(1))

    job = find_job_waiting(410, procfs, sleep=python_starts)
    # THEN it is read again until it has, and the ranks are the Python processes
    assert len(waits) == 2 and [r.pid for r in job.ranks] == [411, 421]


def test_hangdoc_ps_lists_the_python_ranks_not_their_wrappers(wrapped):
    # WHEN the node's jobs are listed
    jobs = list_jobs(ProcFS(wrapped.root))
    # THEN one job, its ranks the Python processes, under the launcher
    assert [(j.launcher_pid, [r.pid for r in j.ranks], j.workers) for j in jobs] == [(100, [111, 121], 2)]


def test_the_report_shows_each_ranks_wrapper_as_its_parent(tmp_path):
    # GIVEN a recorded hang (saved before wrappers were read: none) whose ranks ran under `bash wrap.sh`,
    # saved and read back
    old = load_bundle(GOLDEN / "frozen-lock" / "bundle.json")
    assert all(p.wrappers == () for p in old.job.processes)
    procs = tuple(dataclasses.replace(p, wrappers=(Wrapper(p.pid - 1, BASH),)) if p.role is Role.RANK else p
                  for p in old.job.processes)
    bundle = load_bundle(save_bundle(dataclasses.replace(old, job=dataclasses.replace(old.job, processes=procs)),
                                     tmp_path / "wrapped.json"))
    assert [p.wrappers for p in bundle.job.processes] == [p.wrappers for p in procs]
    ranks = sorted(bundle.job.ranks, key=lambda p: p.rank)
    # WHEN it is judged and printed
    out = io.StringIO()
    render_text(judge(bundle).report, out, width=200, terminal=False)
    # THEN a line names the wrapper as each rank's parent, by its pid
    parents = ", ".join(str(r.pid - 1) for r in ranks)
    assert f"Ranks behind wrappers, each the Python process its wrapper runs: ranks 0-1 under bash wrap.sh " \
           f"(parent pids {parents})" in " ".join(out.getvalue().split())
