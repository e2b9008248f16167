"""Hangs in the job's own code on real torchrun jobs: a breakpoint() left in, a DataLoader worker
on a held flock, a rank in subprocess.run(["cat", fifo]). Each gets its own rule, the culprit
rank, and the user's file:line; the job (pdb prompt, lock holder, cat) is always ended."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import JOBS, end_job, replayed, run_hangdoc
from hangdoc.scenarios.launch import start_job, torchrun_cmd, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

SCRIPT = JOBS / "own_waits_job.py"
WATCH = ("--format", "json", "--no-live", "--no-gpu", "--hang-after", "8")


def line_of(code: str, after: int = 0) -> str:
    """"own_waits_job.py:N" of the first line whose code starts with `code` (plus `after` lines)."""
    lines = SCRIPT.read_text().splitlines()
    return f"own_waits_job.py:{next(i for i, line in enumerate(lines, 1) if line.strip().startswith(code)) + after}"


@pytest.fixture
def own_waits_job(tmp_path):
    """GIVEN a real 2-rank gloo job that hangs in its own code in the chosen --mode."""
    started = []

    def start(mode: str):
        cmd = torchrun_cmd(SCRIPT, "--workdir", str(tmp_path), "--mode", mode)
        job = start_job(cmd, cwd=tmp_path, log_path=tmp_path / "job.log")
        started.append(job)
        if not wait_for([tmp_path / "ready.0", tmp_path / "ready.1", tmp_path / "fault"], job, timeout=60):
            pytest.fail("job did not reach its markers; log tail:\n" + (tmp_path / "job.log").read_text()[-3000:])
        job.refresh_tree()
        return job

    yield start
    for job in started:
        end_job(job)


def watch(pid: int, tmp_path: Path):
    done = run_hangdoc("watch", str(pid), *WATCH, "--out", str(tmp_path / "bundle.json"), timeout=60)
    return done, (json.loads(done.stdout) if done.stdout.strip() else None)


def finding(report: dict, rule: str) -> dict:
    found = [f for f in report["findings"] if f["rule"] == rule]
    assert found, [(f["rule"], f["title"]) for f in report["findings"]]
    return found[0]


@replayed("live-own-waits-live-a-breakpoint-left-in-rank-0-is-a-pdb-prompt-at-its-line", "golden-pdb-breakpoint")
def test_a_breakpoint_left_in_rank_0_is_a_pdb_prompt_at_its_line(own_waits_job, tmp_path):
    # GIVEN rank 0 stopped at breakpoint() (stdin a pipe nobody writes), rank 1 in all_reduce
    job = own_waits_job("breakpoint")
    # WHEN hangdoc watches the torchrun launcher
    done, report = watch(job.pid, tmp_path)
    # THEN a hang (exit 3) of rank 0, debugger-prompt at the line pdb stopped at, a fix of its own
    assert done.returncode == 3, done.stderr
    assert report["culprit_ranks"] == [0]
    prompt = finding(report, "debugger-prompt")
    where = line_of("breakpoint()", after=1)
    assert prompt["ranks"] == [0] and where in prompt["title"]
    assert any(where in e and "Cmd.cmdloop" in e for e in prompt["evidence"])
    assert any("stdin (fd 0) is a pipe" in e for e in prompt["evidence"])
    assert "PYTHONBREAKPOINT=0" in prompt["fix"]
    assert "balance its data" not in finding(report, "collective-straggler")["fix"]


@replayed("live-own-waits-live-a-worker-blocked-on-a-held-flock-names-the-holder-and-the-datasets-line", "golden-flock-worker")
def test_a_worker_blocked_on_a_held_flock_names_the_holder_and_the_datasets_line(own_waits_job, tmp_path):
    # GIVEN rank 0's child holding shard.lock, and a rank-1 DataLoader worker asking for it
    job = own_waits_job("flock")
    # WHEN watched
    done, report = watch(job.pid, tmp_path)
    # THEN rank 1's hang is a file-lock wait: the path, the holder's pid and command line, the line
    assert done.returncode == 3, done.stderr
    assert report["culprit_ranks"] == [1]
    wait = finding(report, "file-lock-wait")
    assert wait["ranks"] == [1] and str(tmp_path / "shard.lock") in wait["title"]
    assert line_of("fcntl.flock(fd, fcntl.LOCK_EX)      # held") in wait["title"]
    holder = next(e for e in wait["evidence"] if e.startswith("the lock is held by pid"))
    assert "(a child process of rank 0)" in holder and "sync_shards.py" in holder
    assert "balance its data" not in finding(report, "collective-straggler")["fix"]


@replayed("live-own-waits-live-a-rank-in-subprocess-run-of-cat-on-a-fifo-names-the-child", "golden-subprocess-fifo")
def test_a_rank_in_subprocess_run_of_cat_on_a_fifo_names_the_child(own_waits_job, tmp_path):
    # GIVEN rank 1 in subprocess.run(["cat", fifo]) with no timeout, nobody writing the FIFO
    job = own_waits_job("subprocess")
    # WHEN watched
    done, report = watch(job.pid, tmp_path)
    # THEN rank 1 waits for its child: cat's pid and command line, what it is blocked in, the line
    assert done.returncode == 3, done.stderr
    assert report["culprit_ranks"] == [1]
    wait = finding(report, "child-process-wait")
    assert wait["ranks"] == [1] and line_of('subprocess.run(["cat", str(fifo)]') in wait["title"]
    assert "(cat manifest.fifo)" in wait["title"]
    assert any(f"cat {tmp_path / 'manifest.fifo'}" in e for e in wait["evidence"])
    assert any("FIFO" in e for e in wait["evidence"]) and "timeout" in wait["fix"]
