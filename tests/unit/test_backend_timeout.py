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
