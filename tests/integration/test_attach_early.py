"""`torchrun ... & hangdoc watch $!`: attached before the launcher has started its ranks, hangdoc
waits for them instead of calling the launcher "not part of a distributed job"."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import run_hangdoc
from hangdoc.live.attach import find_job_waiting
from hangdoc.base.errors import NotDistributed
from hangdoc.bundle.files import load_bundle
from hangdoc.collect.procfs import ProcFS
from hangdoc.live.proc import RunningJob, stop_job

# A launcher as torchrun is one to hangdoc: named so on its command line, its ranks started late,
# each with RANK / WORLD_SIZE in its environment.
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    time.sleep(float(sys.argv[1]))
    ranks = [subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.2)"],
                              env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT="29999"))
             for r in range(2)]
    for p in ranks:
        p.wait()
""")


def _launcher(tmp_path, delay: float) -> RunningJob:
    script = tmp_path / "torchrun_like.py"
    script.write_text(LAUNCHER)
    popen = subprocess.Popen([sys.executable, str(script), str(delay), "torchrun"], start_new_session=True)
    return RunningJob(popen)


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_watch_on_a_launcher_before_its_ranks_exist_waits_for_them(tmp_path):
    # GIVEN a launcher that starts its two ranks 3 s after it starts
    job = _launcher(tmp_path, 3.0)
    job.refresh_tree()
    try:
        # WHEN hangdoc is pointed at it at once, as `torchrun ... & hangdoc watch $!` does
        result = run_hangdoc("watch", str(job.popen.pid), "--once", "--no-gpu", "--out", str(tmp_path / "b.json"),
                             timeout=60)
        # THEN it says it waits, then captures both ranks, exit 0
        assert result.returncode == 0, result.stderr
        assert "no rank yet; waiting" in result.stderr
        bundle = load_bundle(tmp_path / "b.json")
        assert [p.rank for p in bundle.job.ranks] == [0, 1]
    finally:
        stop_job(job)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_launcher_that_never_starts_a_rank_is_refused_after_the_patience(tmp_path):
    # GIVEN a launcher that will not start its ranks for a minute
    job = _launcher(tmp_path, 60.0)
    clock = iter(range(0, 1000, 1))
    try:
        # WHEN hangdoc waits with a patience of 3 s (its clock and sleep injected)
        with pytest.raises(NotDistributed) as refused:
            find_job_waiting(job.popen.pid, ProcFS(), patience_s=3.0, sleep=lambda s: None,
                             clock=lambda: float(next(clock)))
        # THEN it is refused with a line that says why and what to try
        assert "started no rank in 3 s" in str(refused.value) and "hangdoc ps" in str(refused.value)
    finally:
        stop_job(job)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_plain_python_process_is_still_refused_at_once(tmp_path):
    # GIVEN a Python process that is no launcher and no rank
    popen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    job = RunningJob(popen)
    try:
        # WHEN hangdoc is pointed at it THEN it says at once that --single is needed
        with pytest.raises(NotDistributed, match="--single"):
            find_job_waiting(popen.pid, ProcFS(), sleep=lambda s: pytest.fail("must not wait"))
    finally:
        stop_job(job)
