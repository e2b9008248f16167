"""Two torchrun agents on this machine form one 2-node job over loopback; one bundle per node, one diagnosis.

Node 1's only rank (global rank 1) loops in its own compute; node 0's rank waits in all_reduce
for it. Each node's hangdoc sees only its own ranks: node 0's watch sees a hang with no local
culprit, node 1's snapshot sees a busy rank; merged, the report names rank 1 on node 1.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hangdoc.bundle.files import load_bundle
from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

# Not `from conftest import ...`: run beside tests/unit, that name is tests/unit/conftest.py.
JOBS = Path(__file__).resolve().parents[1] / "jobs"


def run_hangdoc(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "hangdoc", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """GIVEN a static-rendezvous 2-node job (1 rank a node) whose rank 1, on node 1, stalls in compute;
    node 0's bundle from `hangdoc watch` (it sees the stall), node 1's from `watch --job PID --once`."""
    work = tmp_path_factory.mktemp("multinode")
    bundles = work / "bundles"
    bundles.mkdir()
    port = free_port()
    agents = []
    try:
        for node in (0, 1):
            cmd = torchrun_cmd(JOBS / "stall_job.py", "--workdir", str(work), "--mode", "compute", nproc=1,
                               extra=("--nnodes", "2", "--node_rank", str(node), "--master_addr", "127.0.0.1",
                                      "--master_port", str(port)))
            agents.append(start_job(cmd, cwd=work, log_path=work / f"node{node}.log"))
        if not wait_for([work / "ready.0", work / "ready.1", work / "fault"], agents[0], timeout=90):
            logs = "\n".join((work / f"node{n}.log").read_text(errors="replace")[-2000:] for n in (0, 1))
            pytest.fail(f"the 2-node job did not reach its markers; logs:\n{logs}")
        for agent in agents:
            agent.refresh_tree()
        node0 = run_hangdoc("watch", str(agents[0].pid), "--interval", "0.5", "--hang-after", "4", "--no-live",
                            "--no-gpu", "--format", "json", "--out", str(bundles / "node0.json"))
        node1 = run_hangdoc("watch", "--job", str(agents[1].pid), "--once", "--no-gpu",
                            "--out", str(bundles / "node1.json"))
        assert node1.returncode == 0, node1.stderr
        yield {"dir": bundles, "port": port, "agents": agents, "node0": node0}
    finally:
        for agent in agents:
            stop_job(agent)


def test_merged_bundles_name_the_culprit_and_its_node(two_nodes):
    # WHEN the two nodes' bundles are reported together, from their directory
    done = run_hangdoc("report", str(two_nodes["dir"]), "--format", "json")
    # THEN a hang, rank 1 the culprit, shown on node 1 of this host; no rank missing
    assert done.returncode == 3, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "hang" and report["culprit_ranks"] == [1]
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert ranks[1]["state"] == "compute" and ranks[1]["group_rank"] == 1
    assert ranks[0]["state"] == "collective-wait" and ranks[0]["group_rank"] == 0
    assert {r["host"] for r in ranks.values()} == {socket.gethostname()}
    assert any(f["rule"] == "collective-straggler" and f["ranks"] == [1] for f in report["findings"])
    assert not any(f["rule"] == "missing-ranks" for f in report["findings"])
    # and the text report says where the culprit runs, and draws the stack tree
    text = run_hangdoc("report", str(two_nodes["dir"] / "node0.json"), str(two_nodes["dir"] / "node1.json"))
    assert text.returncode == 3
    assert f"rank 1 runs on node 1, host {socket.gethostname()}, pid " in text.stdout
    assert "[ranks 0-1] <module> (stall_job.py) > train_loop (stall_job.py)" in text.stdout
    assert "[rank 1] heavy_compute (stall_job.py)" in text.stdout


def test_every_bundle_carries_the_job_identity(two_nodes):
    # GIVEN each node's bundle
    for node in (0, 1):
        bundle = load_bundle(two_nodes["dir"] / f"node{node}.json")
        # THEN the run id, master address and port, world size, this node's group rank and host are in it
        job = bundle.job
        assert (job.run_id, job.master_addr, job.master_port, job.world_size) == \
            ("none", "127.0.0.1", two_nodes["port"], 2)
        assert [(p.rank, p.group_rank) for p in job.ranks] == [(node, node)]
        assert job.launcher_pid == two_nodes["agents"][node].pid
        assert bundle.host.hostname == socket.gethostname()


def test_waiting_node_alone_sees_a_hang_whose_culprit_is_elsewhere(two_nodes):
    # GIVEN node 0's own watch, which sees only rank 0 waiting in all_reduce
    done = two_nodes["node0"]
    # THEN it still calls a hang (exit 3, bundle written) with no local culprit, and says who is missing
    assert done.returncode == 3, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "hang" and report["culprit_ranks"] == []
    missing = [f for f in report["findings"] if f["rule"] == "missing-ranks"]
    assert missing and missing[0]["ranks"] == [1] and missing[0]["severity"] == "warning"
    assert "the culprit is on another node" in missing[0]["title"]
    assert (two_nodes["dir"] / "node0.json").is_file()


def test_one_nodes_bundle_says_which_ranks_are_missing(two_nodes):
    # WHEN only node 1's bundle is reported
    done = run_hangdoc("report", str(two_nodes["dir"] / "node1.json"))
    # THEN the report says rank 0 (node 0) is not in it
    assert "missing-ranks  Rank 0 of 2 is not in the bundle (node 0 not captured)" in done.stdout


def test_watch_job_lists_the_jobs_when_several_run_here(two_nodes):
    # GIVEN two agents on this machine (and perhaps other jobs)
    # WHEN `hangdoc watch --job` is run without naming one
    done = run_hangdoc("watch", "--job", "--once", "--no-gpu", "--out", str(two_nodes["dir"].parent / "x.json"))
    # THEN exit 2 with a list of the jobs and how to pick one
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--job RUN_ID" in done.stderr
    for agent in two_nodes["agents"]:
        assert f"launcher pid {agent.pid} (torchrun)" in done.stderr
    # and the run id both agents share is not enough: the launcher pid is asked for
    same = run_hangdoc("watch", "--job", "none", "--once", "--no-gpu", "--out", str(two_nodes["dir"].parent / "x.json"))
    assert same.returncode == 2 and "pick one by its launcher pid" in same.stderr


def test_ps_lists_each_agent_with_its_node_and_ranks(two_nodes):
    # WHEN `hangdoc ps --format json` runs on this machine
    done = run_hangdoc("ps", "--format", "json")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert listing["host"] == socket.gethostname()
    ours = {j["launcher_pid"]: j for j in listing["jobs"]
            if j["launcher_pid"] in {a.pid for a in two_nodes["agents"]}}
    # THEN both agents are there: run id, master, world size, node, the rank with its pid and workers
    for node, agent in enumerate(two_nodes["agents"]):
        job = ours[agent.pid]
        assert (job["run_id"], job["master_addr"], job["master_port"], job["world_size"]) == \
            ("none", "127.0.0.1", two_nodes["port"], 2)
        assert (job["group_rank"], job["group_world_size"], job["launcher"]) == (node, 2, "torchrun")
        assert [(r["rank"], r["local_rank"], r["workers"]) for r in job["ranks"]] == [(node, 0, 2)]
        assert job["ranks"][0]["pid"] in agent.refresh_tree()
    # and the text form shows the same on one line per job
    text = run_hangdoc("ps")
    assert f"master 127.0.0.1:{two_nodes['port']}  world size 2  node 1 of 2  launcher {two_nodes['agents'][1].pid} (torchrun)" in text.stdout


def test_bundles_of_two_jobs_are_refused(two_nodes, stall_job, tmp_path):
    # GIVEN a bundle of another job (a standalone 2-rank job)
    other = stall_job("mismatch")
    snap = run_hangdoc("watch", str(other.pid), "--once", "--no-gpu", "--out", str(tmp_path / "other.json"))
    assert snap.returncode == 0, snap.stderr
    # WHEN it is reported together with node 0's bundle
    done = run_hangdoc("report", str(two_nodes["dir"] / "node0.json"), str(tmp_path / "other.json"))
    # THEN exit 2 and one line that names both jobs
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "are bundles of different jobs" in done.stderr
    assert f"run none at 127.0.0.1:{two_nodes['port']}" in done.stderr and "vs run " in done.stderr
