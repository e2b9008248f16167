"""The foundation on a real torchrun job: discovery, stacks, /proc evidence, safety."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CMDLINE_SECRET, PLANTED_SECRETS, hangdoc_cmd
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Role
from hangdoc.live.capture import snapshot_once
from hangdoc.live.options import WatchOptions
from hangdoc.live.probes import make_probes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _topology(bundle):
    ranks = {p.rank: p.pid for p in bundle.job.ranks}
    workers = sorted((p.rank, p.worker_index) for p in bundle.job.by_role(Role.WORKER))
    return ranks, workers


def test_discovery_from_launcher_rank_and_worker_agree(probe_job):
    # GIVEN a running 2-rank job with 2 workers per rank
    job = probe_job()
    probes = make_probes(WatchOptions(gpu=False))
    launcher = snapshot_once(job.pid, probes)
    rank_pid = launcher.job.ranks[1].pid
    worker_pid = next(p.pid for p in launcher.job.by_role(Role.WORKER) if p.rank == 1)

    # WHEN the snapshot starts from a rank pid and from a worker pid
    from_rank = snapshot_once(rank_pid, probes)
    from_worker = snapshot_once(worker_pid, probes)

    # THEN all three find the launcher, the same 2 ranks and the same 4 workers
    expected_workers = [(0, 0), (0, 1), (1, 0), (1, 1)]
    for bundle in (launcher, from_rank, from_worker):
        ranks, workers = _topology(bundle)
        assert sorted(ranks) == [0, 1]
        assert workers == expected_workers
        assert bundle.job.launcher_pid == job.pid
        assert bundle.job.world_size == 2
        assert bundle.job.run_id
        assert all(w.start_method == "fork" for w in bundle.job.by_role(Role.WORKER))


def test_every_rank_stack_holds_the_training_frames(probe_job):
    # GIVEN a running job
    job = probe_job()
    # WHEN it is captured
    bundle = snapshot_once(job.pid, make_probes(WatchOptions(gpu=False)))
    # THEN each rank's main thread runs train_loop under <module>, workers run _worker_loop
    for rank in bundle.job.ranks:
        frames = [f.name for f in bundle.last.sample_of(rank.pid).stack.main.frames]
        assert "train_loop" in frames and frames[-1] == "<module>"
    for worker in bundle.job.by_role(Role.WORKER):
        stack = bundle.last.sample_of(worker.pid).stack
        assert "_worker_loop" in [f.name for f in stack.main.frames]
        assert {t.name for t in stack.threads} >= {"MainThread"}
    assert bundle.host.torch_version.startswith("2.")


def test_worker_read_position_grows_between_captures(probe_job, tmp_path):
    # GIVEN a job whose workers read a data file
    job = probe_job()
    probes = make_probes(WatchOptions(gpu=False))
    data = str(tmp_path / "data.bin")

    def positions(bundle):
        out = {}
        for worker in bundle.job.by_role(Role.WORKER):
            for f in bundle.last.sample_of(worker.pid).proc.open_files:
                if f.path == data:
                    out[worker.pid] = f.pos
        return out

    # WHEN it is captured twice, half a second apart
    first = positions(snapshot_once(job.pid, probes))
    time.sleep(0.5)
    second = positions(snapshot_once(job.pid, probes))

    # THEN every worker holds the file open and at least one moved forward
    assert len(first) == 4 and set(first) == set(second)
    assert any(second[pid] > first[pid] for pid in first)


def test_planted_secrets_never_reach_the_bundle(probe_job, tmp_path):
    # GIVEN a job with credentials in its environment and on its command line
    job = probe_job()
    out = tmp_path / "bundle.json"
    # WHEN the CLI writes a bundle
    done = subprocess.run([*hangdoc_cmd(), "watch", str(job.pid), "--once", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    # THEN none of the values is in it, while the allowlisted variables are
    for value in [*PLANTED_SECRETS.values(), CMDLINE_SECRET]:
        assert value not in text
    assert "AWS_SECRET_ACCESS_KEY" not in text and "DB_PASSWORD" not in text
    env = load_bundle(out).job.ranks[0].env
    assert env["WORLD_SIZE"] == "2" and env["TORCH_HUB_TOKEN"] == "<redacted>"


def test_worker_that_exits_mid_capture_is_recorded(probe_job, tmp_path):
    # GIVEN a job and a snapshot taken while all workers live
    job = probe_job("--exit-worker")
    probes = make_probes(WatchOptions(gpu=False))
    before = snapshot_once(job.pid, probes)
    victim = next(p for p in before.job.by_role(Role.WORKER) if p.rank == 1 and p.worker_index == 1)

    # WHEN that worker exits and the old topology is captured again
    (tmp_path / "exit-worker").touch()
    deadline = time.monotonic() + 20
    while Path(f"/proc/{victim.pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    from hangdoc.collect.snapshot import capture
    snapshot, _ = capture(before.job, probes)

    # THEN the capture completes and records the worker as gone, with the reason
    sample = snapshot.sample_of(victim.pid)
    assert sample.alive is False
    assert any("could not collect" in e for e in sample.errors)
    assert all(snapshot.sample_of(r.pid).stack is not None for r in before.job.ranks)


def test_cli_errors_are_one_line_with_exit_2(tmp_path):
    # GIVEN pids that are not jobs: one that does not exist, one that is not Python
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        cases = {"999999999": "no process with pid", str(sleeper.pid): "not a Python process"}
        for pid, message in cases.items():
            # WHEN watched
            done = subprocess.run([*hangdoc_cmd(), "watch", pid, "--once", "--out", str(tmp_path / "b.json")],
                                  capture_output=True, text=True, timeout=30)
            # THEN one clear line and exit 2
            assert done.returncode == 2, done.stderr
            assert message in done.stderr and "Traceback" not in done.stderr
            assert len(done.stderr.strip().splitlines()) == 1
    finally:
        sleeper.kill()
        sleeper.wait()


def test_lone_python_process_is_refused_then_captured_with_single(tmp_path):
    # GIVEN a Python process outside any distributed job
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"])
    try:
        time.sleep(0.3)
        out = tmp_path / "b.json"
        # WHEN watched plainly THEN it says so, exit 2, and names --single
        done = subprocess.run([*hangdoc_cmd(), "watch", str(proc.pid), "--once", "--out", str(out)],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and "--single" in done.stderr
        # WHEN watched with --single THEN a bundle of that one process is written
        done = subprocess.run([*hangdoc_cmd(), "watch", str(proc.pid), "--once", "--single", "--out", str(out)],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        bundle = load_bundle(out)
        assert bundle.job.single_process and [p.pid for p in bundle.job.ranks] == [proc.pid]
    finally:
        proc.kill()
        proc.wait()


def test_unwritable_out_is_refused_before_capture(tmp_path):
    done = subprocess.run([*hangdoc_cmd(), "watch", "1", "--once", "--out", str(tmp_path / "no" / "b.json")],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "does not exist" in done.stderr


def test_the_stack_engine_reads_each_ranks_loop_position(probe_job):
    # GIVEN a running 2-rank job stepping through its DataLoader
    job = probe_job()
    probes = make_probes(WatchOptions(gpu=False))
    # WHEN it is captured twice, a moment apart
    first = snapshot_once(job.pid, probes)
    time.sleep(0.5)
    second = snapshot_once(job.pid, probes)
    # THEN each rank's main thread carries a LoopMark of its own code (train_loop, the
    # outermost job frame first), its `step` counter by value, and the step moved on
    for rank in first.job.ranks:
        marks = [b.last.sample_of(rank.pid).stack.main.loop for b in (first, second)]
        assert all(m is not None for m in marks)
        assert [f.function for f in marks[0].frames][:2] == ["<module>", "train_loop"]
        steps = [dict(m.frames[1].counters).get("step") for m in marks]
        assert all(isinstance(s, int) for s in steps)
        assert steps[1] > steps[0]
        assert all(len(f.digest) == 16 for f in marks[0].frames)


def test_the_pystack_engine_reads_the_same_job_as_py_spy(probe_job):
    pytest.importorskip("pystack.engine")
    # GIVEN a running 2-rank job with 2 workers per rank
    job = probe_job()
    # WHEN it is captured through the fallback engine, pystack, in-process
    bundle = snapshot_once(job.pid, make_probes(WatchOptions(gpu=False, engine="pystack")))
    # THEN the same ranks and worker indices are found, each rank's loop is read, and the bundle names the engine
    ranks, workers = _topology(bundle)
    assert sorted(ranks) == [0, 1]
    assert workers == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for rank in bundle.job.ranks:
        main = bundle.last.sample_of(rank.pid).stack.main
        frames = [f.name for f in main.frames]
        assert "train_loop" in frames and frames[-1] == "<module>"
        assert main.loop is not None
    assert bundle.options.engine == "pystack"


def test_watch_once_says_the_verdict_report_will_print(probe_job, tmp_path):
    # GIVEN a running 2-rank job
    job = probe_job()
    out = tmp_path / "once.json"
    # WHEN one snapshot is taken, then reported
    once = subprocess.run([*hangdoc_cmd(), "watch", str(job.pid), "--once", "--no-gpu", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    report = subprocess.run([*hangdoc_cmd(), "report", str(out)], capture_output=True, text=True, timeout=60)
    # THEN --once prints the headline `report` prints for that bundle, and says one instant is at most suspect
    assert once.returncode == 0, once.stderr
    headline = report.stdout.splitlines()[0]
    assert headline.startswith("hangdoc: ") and headline in once.stderr.splitlines()
    assert "from one snapshot a hang reads SUSPECT at most" in once.stderr and f"hangdoc report {out}" in once.stderr


def test_check_data_takes_the_world_size_of_the_job_running_here(probe_job, tmp_path):
    # GIVEN a running 2-rank job on this node, and a shell without torchrun's variables
    probe_job()
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{tmp_path}/s{i}.tar\n" for i in range(4)))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "CUDA_VISIBLE_DEVICES")}
    # WHEN `hangdoc check data LIST -k 1` runs without --world-size
    done = subprocess.run([*hangdoc_cmd(), "check", "data", str(listing), "-k", "1"], capture_output=True, text=True,
                          timeout=60, env=env)
    # THEN it checks the job's 2 ranks, and says where 2 came from
    assert "4 shards in 1 list, 2 ranks x 1 worker" in done.stdout, done.stderr
    assert ("--world-size not given: checking for 2 ranks (the world size of the job running on this node)"
            in done.stderr)
