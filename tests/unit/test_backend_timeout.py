"""The backend's default timeout, from the ranks' thread names (c10d names its own threads)."""
from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path

import pytest

from hangdoc.bundle.files import load_bundle
from hangdoc.collect.procfs import ProcFS
from hangdoc.analyze.assess import pg_timeout

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def with_thread_names(bundle, names):
    last = bundle.samples[-1]
    procs = tuple(dataclasses.replace(s, proc=dataclasses.replace(s.proc, thread_names=names))
                  if s.proc is not None else s for s in last.processes)
    return dataclasses.replace(bundle, samples=bundle.samples[:-1] + (dataclasses.replace(last, processes=procs),))


@pytest.mark.parametrize("names, expected", [
    (("cuda-EvtHandlr", "pt_autograd_0", "pt_gloo_runloop", "python3"), 1800.0),   # the real gloo+CUDA ranks
    (("cuda-EvtHandlr", "pt_nccl_heartbt", "pt_nccl_watchdg", "python3"), 600.0),  # the real 1-rank NCCL job
    (("pt_gloo_runloop", "pt_nccl_watchdg"), 600.0),          # NCCL and a gloo side group: NCCL's watchdog
    ((), 600.0),                                               # no names read (older bundles): libnccl mapped
])
def test_the_timeout_follows_the_backend_the_threads_name(names, expected):
    # GIVEN the job recorded on a real GPU (its ranks map libnccl: a CUDA build of torch), with
    # the thread names a rank of each backend had there
    bundle = with_thread_names(load_bundle(GOLDEN / "gpu-gloo-cuda" / "bundle.json"), names)
    assert any("libnccl" in lib for p in bundle.job.ranks for lib in p.libs)
    # THEN the default timeout is that backend's
    assert pg_timeout(bundle) == expected


def test_a_gloo_job_on_a_cuda_build_reads_gloo_as_recorded():
    # GIVEN the recorded bundle as saved (thread names read on the GPU machine)
    bundle = load_bundle(GOLDEN / "gpu-gloo-cuda" / "bundle.json")
    # THEN 30 min, not NCCL's 10 that the mapped libnccl suggested
    assert pg_timeout(bundle) == 1800.0


def test_thread_names_are_read_from_proc():
    # GIVEN this process with a thread named as c10d names gloo's run loop
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        Path(f"/proc/self/task/{thread.native_id}/comm").write_text("pt_gloo_runloop")
        # WHEN hangdoc reads the names THEN it is among them, once
        names = ProcFS().thread_names(os.getpid())
        assert names.count("pt_gloo_runloop") == 1
    finally:
        stop.set()
        thread.join()


def straggler_fix(bundle) -> str:
    from hangdoc.report import judge

    return next(f.fix for f in judge(bundle).report.findings if f.rule == "collective-straggler")


def test_a_gloo_jobs_straggler_fix_names_gloo_not_nccls_variables():
    # GIVEN a gloo job whose rank 1 computes while rank 0 waits in all_reduce (no finding above it)
    bundle = load_bundle(GOLDEN / "compute-straggler" / "bundle.json")
    # WHEN the straggler's fix is written
    fix = straggler_fix(bundle)
    # THEN it gives gloo's way to record the collectives, and no NCCL variable
    assert "TORCH_NCCL" not in fix and "NCCL" not in fix
    assert "gloo has no dump on a timeout" in fix and "TORCH_FR_BUFFER_SIZE=2000" in fix


def test_an_nccl_jobs_straggler_fix_names_nccls_dump_variables():
    # GIVEN the same evidence, its ranks running NCCL's watchdog
    bundle = with_thread_names(load_bundle(GOLDEN / "compute-straggler" / "bundle.json"),
                               ("pt_nccl_heartbt", "pt_nccl_watchdg"))
    # THEN the fix is NCCL's: dump on a timeout or through the pipe
    fix = straggler_fix(bundle)
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT=1" in fix and "gloo" not in fix


def test_a_straggler_held_by_a_worker_deadlock_points_at_it_and_does_not_say_balance_its_data():
    # GIVEN a job whose rank 1 waits on a deadlocked DataLoader worker (worker-deadlock above)
    bundle = load_bundle(GOLDEN / "worker-deadlock" / "bundle.json")
    # WHEN collective-straggler writes its fix
    fix = straggler_fix(bundle)
    # THEN it follows the finding above rather than contradict it
    assert fix == ("Rank 1 is held by its DataLoader, not by its share of the work: follow the fix of the "
                   "worker-deadlock finding above; the ranks waiting for it need no change.")


def test_the_report_carries_the_backend_and_names_it_beside_the_timeout():
    from hangdoc.render.words import timeout_line
    from hangdoc.report import judge

    # GIVEN a gloo job's hang WHEN judged
    report = judge(load_bundle(GOLDEN / "compute-straggler" / "bundle.json")).report
    # THEN the report carries its backend, and the timeout's line names it
    assert report.backend == "gloo"
    assert timeout_line(report).startswith("The process group's timeout (default 1800 s for gloo) ")
