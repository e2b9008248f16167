"""Finding the job on this node without a pid (`watch --job`, `ps`), on a fake /proc tree."""
from __future__ import annotations

import pytest

from hangdoc.collect.jobs import list_jobs, pick_job
from hangdoc.collect.procfs import ProcFS
from hangdoc.base.errors import EXIT_USAGE, HangdocError

TORCHRUN = ("/usr/bin/python3", "/usr/local/bin/torchrun", "--nnodes=2", "train.py")
TRAIN = ("/usr/bin/python3", "-u", "train.py")


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
    # WHEN the job is looked for with no pid THEN exit 2, both listed, and the hint
    with pytest.raises(HangdocError) as err:
        pick_job(None, ProcFS(proc.root))
    message = str(err.value)
    assert err.value.exit_code == EXIT_USAGE
    assert message.splitlines() == [
        "2 jobs on this node; pick one with --job RUN_ID (or its launcher pid: --job PID, or `hangdoc watch PID`):",
        "  run job-a at 10.0.0.1:29500, node 0 of 2, world size 4: launcher pid 1000 (torchrun), ranks 0-1",
        "  run job-b at 10.0.0.1:29600, node 0 of 2, world size 4: launcher pid 2000 (torchrun), ranks 0-1",
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
