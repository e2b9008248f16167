"""Finding the job on this node without a pid (`watch --job`, `ps`), on a fake /proc tree."""
from __future__ import annotations

import os
import time

import pytest

from hangdoc.collect.jobs import list_jobs, pick_job, user_name
from hangdoc.collect.procfs import ProcFS
from hangdoc.base.errors import EXIT_USAGE, HangdocError

TORCHRUN = ("/usr/bin/python3", "/usr/local/bin/torchrun", "--nnodes=2", "train.py")
TRAIN = ("/usr/bin/python3", "-u", "train.py")
STARTED = time.strftime("%H:%M", time.localtime(1700000000))    # the fake /proc's boot time: btime


class FakeProc:
    """A /proc tree: stat, cmdline and environ for each process."""

    def __init__(self, root):
        self.root = root
        (root / "stat").write_text("cpu 0 0 0 0\nbtime 1700000000\n")

    def add(self, pid: int, ppid: int, cmdline: tuple[str, ...], env: dict[str, str] | None = None) -> int:
        d = self.root / str(pid)
        d.mkdir()
        rest = " ".join(["0"] * 30)
        (d / "stat").write_text(f"{pid} (python3) S {ppid} {pid} {pid} {rest}\n")
        (d / "cmdline").write_bytes(b"\0".join(w.encode() for w in cmdline) + b"\0")
        (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in (env or {}).items()) + b"\0")
        return pid

    def agent(self, launcher: int, run_id: str, port: int, node: int, ranks: list[int], workers: int = 2) -> None:
        """A torchrun agent with one rank per entry of `ranks` (global rank numbers) and its workers."""
        self.add(launcher, 1, TORCHRUN)
        for local, rank in enumerate(ranks):
            pid = launcher + 10 * (local + 1)
            env = {"RANK": str(rank), "WORLD_SIZE": "4", "LOCAL_RANK": str(local), "GROUP_RANK": str(node),
                   "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": str(port),
                   "TORCHELASTIC_RUN_ID": run_id}
            self.add(pid, launcher, TRAIN, env)
            for w in range(workers):
                self.add(pid + 1 + w, pid, TRAIN, env)   # forked: same command line as its rank


@pytest.fixture
def proc(tmp_path):
    return FakeProc(tmp_path)


def test_the_only_job_on_the_node_is_found_without_a_pid(proc):
    # GIVEN one torchrun agent with ranks 2 and 3 (node 1 of 2), two workers each
    proc.agent(1000, "job-a", 29500, node=1, ranks=[2, 3])
    # WHEN the job is looked for with no pid
    job = pick_job(None, ProcFS(proc.root))
    # THEN it is the agent's, with who the job is and its ranks
    assert (job.run_id, job.master_addr, job.master_port, job.world_size) == ("job-a", "10.0.0.1", 29500, 4)
    assert (job.group_rank, job.group_world_size, job.launcher_pid, job.launcher) == (1, 2, 1000, "torchrun")
    assert [(r.rank, r.local_rank, r.pid, r.workers) for r in job.ranks] == [(2, 0, 1010, 2), (3, 1, 1020, 2)]
    assert job.anchor == 1000 and job.workers == 4


def test_several_jobs_are_listed_with_how_to_pick_one(proc):
    # GIVEN two jobs on the node
    proc.agent(1000, "job-a", 29500, node=0, ranks=[0, 1])
    proc.agent(2000, "job-b", 29600, node=0, ranks=[0, 1])
    # WHEN the job is looked for with no pid, from a session neither was started in
    with pytest.raises(HangdocError) as err:
        pick_job(None, ProcFS(proc.root), caller=(os.getuid(), 1))
    message = str(err.value)
    # THEN exit 2, both listed in words that say what is known, and the hint
    assert err.value.exit_code == EXIT_USAGE
    user = user_name(os.getuid())
    assert message.splitlines() == [
        f"2 jobs of user {user} on this node; pick one with --job RUN_ID (or its launcher pid: --job PID, "
        "or `hangdoc watch PID`):",
        f"  launcher pid 1000 (torchrun): ranks 0-1 of 4, node 0 of 2, run job-a, master 10.0.0.1:29500, "
        f"user {user}, started {STARTED}",
        f"  launcher pid 2000 (torchrun): ranks 0-1 of 4, node 0 of 2, run job-b, master 10.0.0.1:29600, "
        f"user {user}, started {STARTED}",
    ]
    # and naming one by run id, or by its launcher pid, picks it
    assert pick_job("job-b", ProcFS(proc.root)).launcher_pid == 2000
    assert pick_job("1000", ProcFS(proc.root)).run_id == "job-a"


def test_two_agents_of_one_job_are_told_apart_by_their_launcher(proc):
    # GIVEN both agents of a 2-node job on one machine (a test over loopback)
    proc.agent(1000, "none", 29500, node=0, ranks=[0, 1])
    proc.agent(2000, "none", 29500, node=1, ranks=[2, 3])
    # WHEN listed THEN two entries, one per node
    assert [(j.group_rank, j.launcher_pid) for j in list_jobs(ProcFS(proc.root))] == [(0, 1000), (1, 2000)]
    # and the shared run id is not enough to pick one
    with pytest.raises(HangdocError, match="2 launchers on this node run job none .*pick one by its launcher pid"):
        pick_job("none", ProcFS(proc.root))


def test_no_job_on_the_node_is_said(proc):
    # GIVEN only a lone python process WHEN looked for THEN exit 2 and what to do
    proc.add(500, 1, TRAIN, {"HOME": "/root"})
    with pytest.raises(HangdocError, match="no distributed job found on this node"):
        pick_job(None, ProcFS(proc.root))
    with pytest.raises(HangdocError, match="no job with run id or pid nope"):
        proc.agent(1000, "job-a", 29500, node=0, ranks=[0])
        pick_job("nope", ProcFS(proc.root))


def test_with_no_pid_the_job_of_this_terminal_is_picked_among_this_users(proc):
    # GIVEN two jobs of this user, the first started from hangdoc's own session (its launcher leads it)
    proc.agent(1000, "job-a", 29500, node=0, ranks=[0, 1])
    proc.agent(2000, "job-b", 29600, node=0, ranks=[0, 1])
    # WHEN the job is looked for with no pid from session 1000 THEN that session's job is watched
    assert pick_job(None, ProcFS(proc.root), caller=(os.getuid(), 1000)).run_id == "job-a"


def test_another_users_job_is_never_picked_without_being_named(proc):
    # GIVEN the only job on the node runs as another user (its /proc entry is not the caller's uid)
    proc.agent(1000, "job-a", 29500, node=0, ranks=[0, 1])
    other = os.getuid() + 1
    # WHEN a watch with no pid looks for the caller's job
    with pytest.raises(HangdocError) as err:
        pick_job(None, ProcFS(proc.root), caller=(other, 1000))
    # THEN exit 2: none of the caller's, the other user's listed, and how to watch it anyway
    assert err.value.exit_code == EXIT_USAGE
    assert str(err.value).startswith(f"no job of user {user_name(other)} on this node, only other users' "
                                     "(name one to watch it: `hangdoc watch PID` or --job RUN_ID):\n"
                                     "  launcher pid 1000 (torchrun): ranks 0-1 of 4")
    # and naming it picks it
    assert pick_job("1000", ProcFS(proc.root)).run_id == "job-a"


def test_a_listing_error_prints_one_job_a_line(monkeypatch, capsys):
    # GIVEN a watch with no pid on a node whose jobs cannot be told apart
    import hangdoc.collect.jobs as jobs
    from hangdoc.cli import main

    def several(*args, **kwargs):
        raise HangdocError("2 jobs of user alice on this node; pick one:\n  launcher pid 1000\n  launcher pid 2000")
    monkeypatch.setattr(jobs, "pick_job", several)
    # WHEN hangdoc watch runs THEN exit 2, and each job on its own line (no literal backslash-n)
    assert main(["watch"]) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [
        "hangdoc: error: 2 jobs of user alice on this node; pick one:", "  launcher pid 1000", "  launcher pid 2000"]
