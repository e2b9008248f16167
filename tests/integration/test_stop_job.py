"""`stop_job` ends every process of a job hangdoc started, whatever comes meanwhile: a SIGTERM
arriving while it ends the job (a CI runner's timeout as `hangdoc run` stops a hung job) used to
cut it short and leave the job's processes running; and a process that left the ranks' sessions
(`setsid`) and lost its parent is found all the same."""
from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from conftest import JOBS
from hangdoc.base.errors import Interrupted
from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def job_processes(workdir) -> list[psutil.Process]:
    """The live processes whose command line names this test's own work directory."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if str(workdir) in " ".join(proc.info["cmdline"] or ()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def kill_all(procs) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


@pytest.fixture
def hung_job(tmp_path):
    """GIVEN a real 2-rank gloo job, 2 DataLoader workers a rank, hung in compute on rank 1."""
    cmd = torchrun_cmd(JOBS / "stall_job.py", "--workdir", str(tmp_path), "--mode", "compute")
    job = start_job(cmd, cwd=tmp_path, log_path=tmp_path / "job.log")
    try:
        assert wait_for([tmp_path / "ready.0", tmp_path / "ready.1", tmp_path / "fault"], job, timeout=60), \
            (tmp_path / "job.log").read_text(errors="replace")[-2000:]
        job.refresh_tree()
        yield job
    finally:
        kill_all(job_processes(tmp_path))
        if job.popen.poll() is None:
            job.popen.kill()
        job.popen.wait(10)


def test_a_sigterm_while_the_job_is_being_ended_does_not_leave_any_of_it_running(hung_job, tmp_path):
    # GIVEN hangdoc's SIGTERM handler (it raises Interrupted) and the job's processes all alive
    assert len(job_processes(tmp_path)) >= 7       # launcher, 2 ranks, 4 workers
    old = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(Interrupted(143)))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        # WHEN a SIGTERM arrives while stop_job is ending the job
        timer.start()
        with pytest.raises(Interrupted):     # THEN it still reaches the caller, once the job is ended
            stop_job(hung_job)
            time.sleep(2)     # (it may come after stop_job returned: it must not be lost either)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, old)
    # AND no process of the job remains
    time.sleep(0.5)
    left = job_processes(tmp_path)
    assert not left, [(p.pid, " ".join(p.cmdline())[:80]) for p in left]


DEAF = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)      # a rank blocked in C never runs its handler: deaf
if sys.argv[2] == "launcher":
    for rank in range(2):
        subprocess.Popen([sys.executable, __file__, sys.argv[1], "rank"], start_new_session=True)
elif sys.argv[2] == "rank":
    if os.fork() == 0:                               # its DataLoader worker, in the rank's session
        time.sleep(600)
open(os.path.join(sys.argv[1], "ready.%d" % os.getpid()), "w").close()
time.sleep(600)
"""


def test_a_sigterm_while_a_deaf_job_is_being_ended_leaves_none_of_it(tmp_path):
    # GIVEN a job laid out as torchrun's (ranks in sessions of their own, a worker each) whose
    # processes all ignore SIGTERM, as a hung rank blocked in a collective does
    import sys

    script = tmp_path / "deaf.py"
    script.write_text(DEAF)
    job = start_job([sys.executable, str(script), str(tmp_path), "launcher"], cwd=tmp_path)
    old = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(Interrupted(143)))
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("ready.*"))) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        job.refresh_tree()
        assert len(job_processes(tmp_path)) == 5
        # WHEN a SIGTERM comes while stop_job waits for the launcher to go
        timer.start()
        with pytest.raises(Interrupted):     # THEN it still reaches the caller, once the job is ended
            stop_job(job)
            time.sleep(2)
        # AND no process of the job remains
        time.sleep(0.3)
        left = job_processes(tmp_path)
        assert not left, [(p.pid, " ".join(p.cmdline())[:80]) for p in left]
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, old)
        kill_all(job_processes(tmp_path))
        if job.popen.poll() is None:
            job.popen.kill()
        job.popen.wait(10)


def test_a_process_that_left_the_jobs_sessions_and_lost_its_parent_is_ended(tmp_path):
    # GIVEN a job whose process starts a helper in a session of its own, then exits (the helper is
    # re-parented away from the job, in no session hangdoc saw)
    script = tmp_path / "job.py"
    script.write_text(
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {str(tmp_path)!r}],"
        " start_new_session=True)\n"
        "time.sleep(600)\n")
    import sys

    job = start_job([sys.executable, str(script), str(tmp_path)], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while len(job_processes(tmp_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        helper = [p for p in job_processes(tmp_path) if p.pid != job.pid]
        assert helper, "the helper did not start"
        # WHEN hangdoc ends the job (the launcher first, so the helper loses its parent)
        stop_job(job)
        # THEN the helper is gone too
        time.sleep(0.3)
        assert not job_processes(tmp_path), [p.pid for p in job_processes(tmp_path)]
    finally:
        kill_all(job_processes(tmp_path))
