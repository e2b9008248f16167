"""What a data pipeline may use, on real torchrun jobs (tests/jobs/pipeline_job.py): a native pool
its workers inherited through fork, the CPUs its workers may run on."""
from __future__ import annotations

import json
import os
import time

import pytest

from conftest import JOBS, mode_jobs, replayed, run_hangdoc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def pipeline_job(tmp_path):
    """GIVEN a real 2-rank gloo job of tests/jobs/pipeline_job.py in the chosen mode; the whole job is
    ended whatever happens."""
    yield from mode_jobs(tmp_path, JOBS / "pipeline_job.py", timeout=90, outlive_check=True)


def watch(pid: int, out, *extra: str, code: int = 3) -> dict:
    done = run_hangdoc("watch", str(pid), "--format", "json", "--no-live", "--no-gpu", "--interval", "0.5",
                       "--out", str(out), *extra, timeout=120)
    assert done.returncode == code, done.stderr[-2000:]
    return json.loads(done.stdout)


@replayed("live-pipeline-resources-a-worker-stuck-in-openmp-after-fork-is-named-with-the-library-and-its-f", "golden-gomp-fork")
def test_a_worker_stuck_in_openmp_after_fork_is_named_with_the_library_and_its_fix(pipeline_job, tmp_path):
    # GIVEN rank 1 ran an OpenMP region (libgomp) before its DataLoader forked, and its worker 0 runs one after
    job = pipeline_job("gomp-fork")
    # WHEN hangdoc watches it, with no flag
    began = time.monotonic()
    report = watch(job.pid, tmp_path / "bundle.json", "--hang-after", "4")
    took = time.monotonic() - began
    # THEN rank 1 is the culprit and its worker 0 is named stuck inside GNU OpenMP, with OpenMP's own fix
    assert report["verdict"] == "hang" and report["culprit_ranks"] == [1]
    found = next(f for f in report["findings"] if f["rule"] == "worker-native-lock")
    assert found["title"].startswith("DataLoader worker 0 of rank 1 waits for ever inside GNU OpenMP (libgomp"), \
        found["title"]
    assert any("native stack: libgomp" in e for e in found["evidence"]), found["evidence"]
    assert "OpenMP region in the parent" in found["fix"] and "spawn" in found["fix"]
    # AND the bare lock finding gives way to it, and it comes within a few seconds of the hang's
    assert "worker-deadlock" not in {f["rule"] for f in report["findings"]}
    assert took < 30, took


@replayed("live-pipeline-resources-a-worker-stuck-in-the-tokenizers-pool-after-fork-is-told-to-turn-parall", "golden-tokenizers-fork")
def test_a_worker_stuck_in_the_tokenizers_pool_after_fork_is_told_to_turn_parallelism_off(pipeline_job, tmp_path):
    pytest.importorskip("tokenizers")
    # GIVEN rank 1 tokenized a batch (TOKENIZERS_PARALLELISM=true) before its DataLoader forked; worker 0 tokenizes
    job = pipeline_job("tokenizers-fork", env=("TOKENIZERS_PARALLELISM=true",))
    # WHEN hangdoc watches it, with no flag
    report = watch(job.pid, tmp_path / "bundle.json", "--hang-after", "4")
    # THEN the worker is named stuck in the tokenizers' rayon pool, with the tokenizers' own fix
    found = next(f for f in report["findings"] if f["rule"] == "worker-native-lock")
    assert "inside Hugging Face tokenizers' rayon pool" in found["title"], found["title"]
    assert any("TOKENIZERS_PARALLELISM=true" in e for e in found["evidence"]), found["evidence"]
    assert found["fix"].startswith("Set TOKENIZERS_PARALLELISM=false")


@replayed("live-pipeline-resources-workers-pinned-to-one-cpu-are-named-as-the-cause-of-a-data-bound-job", "golden-workers-pinned")
def test_workers_pinned_to_one_cpu_are_named_as_the_cause_of_a_data_bound_job(pipeline_job, tmp_path):
    # GIVEN every DataLoader worker pins itself to the first CPU in worker_init_fn (what llvm-openmp 16
    # does to a forked worker), while its rank may run on every CPU
    job = pipeline_job("pinned", wait_fault=False)
    # WHEN hangdoc watches it for a while
    began = time.monotonic()
    done = run_hangdoc("watch", str(job.pid), "--format", "json", "--no-live", "--no-gpu", "--interval", "0.5",
                       "--timeout", "15", "--out", str(tmp_path / "bundle.json"), timeout=120)
    took = time.monotonic() - began
    assert done.returncode in (0, 8), done.stderr[-2000:]
    report = json.loads(done.stdout)
    # THEN the workers are named confined to CPU 0, with the figures, and the verdict's headline carries it
    found = next(f for f in report["findings"] if f["rule"] == "workers-cpu-confined")
    assert "confined to CPU 0" in found["title"] and found["cause"] == "workers confined to CPU 0"
    assert any("Cpus_allowed_list 0" in e for e in found["evidence"]), found["evidence"]
    assert any(f"may run on {len(os.sched_getaffinity(0))} CPUs" in e for e in found["evidence"]), found["evidence"]
    replay = run_hangdoc("report", str(tmp_path / "bundle.json"))
    assert "data-bound: workers confined to CPU 0" in replay.stdout.splitlines()[0], replay.stdout[:500]   # a straggler's too
    assert took < 40, took


@replayed("live-pipeline-resources-workers-left-on-their-rank-s-cpus-are-not-called-confined")
def test_workers_left_on_their_rank_s_cpus_are_not_called_confined(pipeline_job, tmp_path):
    # GIVEN the same data-bound job with the workers' CPUs left alone
    job = pipeline_job("plain", wait_fault=False)
    # WHEN hangdoc watches it
    done = run_hangdoc("watch", str(job.pid), "--format", "json", "--no-live", "--no-gpu", "--interval", "0.5",
                       "--timeout", "12", "--out", str(tmp_path / "bundle.json"), timeout=120)
    # THEN nothing says the workers are confined
    assert done.returncode in (0, 8), done.stderr[-2000:]
    assert "workers-cpu-confined" not in {f["rule"] for f in json.loads(done.stdout)["findings"]}
    assert "confined" not in done.stderr


@replayed("live-pipeline-resources-intra-op-threads-past-the-cores-are-named-and-one-a-cpu-is-not-8-true", "live-pipeline-resources-intra-op-threads-past-the-cores-are-named-and-one-a-cpu-is-not-1-false", "golden-omp-oversubscribed", "golden-omp-one-thread")
@pytest.mark.parametrize("threads, oversubscribed", [("8", True), ("1", False)])
def test_intra_op_threads_past_the_cores_are_named_and_one_a_cpu_is_not(pipeline_job, tmp_path, threads,
                                                                         oversubscribed):
    # GIVEN 2 ranks that multiply matrices every step with OMP_NUM_THREADS=8 (or 1, torchrun's default)
    job = pipeline_job("compute", "--workers", "1", wait_fault=False, env=(f"OMP_NUM_THREADS={threads}",))
    # WHEN hangdoc watches it for a while
    began = time.monotonic()
    done = run_hangdoc("watch", str(job.pid), "--format", "json", "--no-live", "--no-gpu", "--interval", "0.5",
                       "--timeout", "12", "--out", str(tmp_path / "bundle.json"), timeout=120)
    took = time.monotonic() - began
    assert done.returncode in (0, 8), done.stderr[-2000:]
    found = [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "threads-oversubscribed"]
    # THEN 16 threads on this node's CPUs are named, with the run-queue wait and the fix; 2 threads are not
    cpus = len(os.sched_getaffinity(0))
    if not oversubscribed or 16 < 2 * cpus:
        assert not found, found
        return
    assert found and f"16 intra-op threads set for {cpus}" in found[0]["title"], found
    assert any("waited for a CPU" in e for e in found[0]["evidence"]), found[0]["evidence"]
    assert "OMP_NUM_THREADS" in found[0]["fix"] and took < 40


def own_shm_allowed() -> bool:
    """Whether a mount namespace with a tmpfs of its own at /dev/shm can be made here (root, as in a container)."""
    import subprocess

    done = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                          capture_output=True, timeout=30)
    return done.returncode == 0


@replayed("live-pipeline-resources-a-dev-shm-too-small-for-the-batches-is-named-with-its-size", "golden-shm-small")
def test_a_dev_shm_too_small_for_the_batches_is_named_with_its_size(tmp_path):
    # GIVEN a job in a mount namespace whose /dev/shm is 16 MB; after 6 s its workers hand over 8 MB batches
    if not own_shm_allowed():
        pytest.skip("no mount namespace of its own here: the golden case shm-small holds a recorded one")
    import shlex

    from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

    cmd = torchrun_cmd(JOBS / "pipeline_job.py", "--workdir", str(tmp_path), "--mode", "big-batches",
                       "--sample-mb", "2", "--fault-after", "6")
    job = start_job(["unshare", "-m", "sh", "-c",
                     f"mount -t tmpfs -o size=16m tmpfs /dev/shm && exec {shlex.join(cmd)}"],
                    cwd=tmp_path, log_path=tmp_path / "job.log")
    try:
        assert wait_for([tmp_path / "ready.0", tmp_path / "ready.1"], job, timeout=90), \
            (tmp_path / "job.log").read_text()[-3000:]
        # WHEN hangdoc watches it until it crashes
        began = time.monotonic()
        report = watch(job.pid, tmp_path / "bundle.json", code=4)   # a crash
        took = time.monotonic() - began
    finally:
        stop_job(job)
    # THEN the crash is put down to /dev/shm, its size named, with the fix
    assert report["verdict"] == "crash", report["verdict"]
    found = next(f for f in report["findings"] if f["rule"] == "shm-exhausted")
    assert found["title"].startswith("/dev/shm (16.8 MB) ran out"), found["title"]
    assert any("unable to allocate shared memory" in e for e in found["evidence"]), found["evidence"]
    assert "--shm-size" in found["fix"] and took < 40, took


def quota_group(name: str, cpus: float):
    """A cgroup with a CPU quota of `cpus` CPUs that this test may make (root, cgroup v1 cpu or v2), or None."""
    from pathlib import Path

    period = 100_000
    v1 = Path("/sys/fs/cgroup/cpu")
    group = (v1 if v1.is_dir() else Path("/sys/fs/cgroup")) / name
    try:
        group.mkdir(exist_ok=True)
        if v1.is_dir():
            (group / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
        else:
            (group / "cpu.max").write_text(f"{int(cpus * period)} {period}")
    except OSError:
        return None
    return group


@replayed("live-pipeline-resources-a-cpu-quota-that-throttles-a-data-bound-job-is-named-with-its-share")
def test_a_cpu_quota_that_throttles_a_data_bound_job_is_named_with_its_share(tmp_path):
    # GIVEN 2 ranks x 2 workers of CPU-heavy loading in a cgroup whose CPU quota is 0.2 CPUs
    group = quota_group(f"hangdoc-test-{os.getpid()}", 0.2)
    if group is None:
        pytest.skip("no cgroup with a CPU quota can be made here: the golden case cpu-quota holds a recorded one")
    import shlex

    from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

    cmd = torchrun_cmd(JOBS / "pipeline_job.py", "--workdir", str(tmp_path), "--mode", "plain")
    job = start_job(["sh", "-c", f"echo $$ > {group / 'cgroup.procs'} && exec {shlex.join(cmd)}"],
                    cwd=tmp_path, log_path=tmp_path / "job.log")
    try:
        assert wait_for([tmp_path / "ready.0", tmp_path / "ready.1"], job, timeout=120), \
            (tmp_path / "job.log").read_text()[-3000:]
        # WHEN hangdoc watches it for a while
        began = time.monotonic()
        done = run_hangdoc("watch", str(job.pid), "--format", "json", "--no-live", "--no-gpu", "--interval", "0.5",
                           "--timeout", "15", "--out", str(tmp_path / "bundle.json"), timeout=120)
        took = time.monotonic() - began
    finally:
        stop_job(job)
        group.rmdir()
    # THEN the quota is named, with the share of periods it throttled, and the headline carries it
    assert done.returncode in (0, 8), done.stderr[-2000:]
    found = next(f for f in json.loads(done.stdout)["findings"] if f["rule"] == "cpu-quota-throttled")
    assert found["title"].startswith("The job's CPU quota (0.2 CPUs) throttles it in "), found["title"]
    assert any("periods" in e and "cpu.stat" in e for e in found["evidence"]), found["evidence"]
    replay = run_hangdoc("report", str(tmp_path / "bundle.json"))
    assert "a CPU quota of 0.2 CPUs" in replay.stdout.splitlines()[0], replay.stdout[:500]
    assert took < 40, took
