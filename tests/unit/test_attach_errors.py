"""Attach errors teach the fix: ptrace refused, py-spy missing, a process of another user."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from hangdoc.collect.stacks import PySpy, StackError, find_py_spy
from hangdoc.base.errors import PtraceDenied, PySpyMissing
from hangdoc.model import Job, ProcessInfo, ProcSample, Role, Snapshot, GpuState
from hangdoc.live.probes import require_stacks

PY_SPY_DENIED = ("Error: Permission Denied: Try running again with elevated permissions by going "
                 "'sudo env \"PATH=$PATH\" !!'\n")


def fake_run(returncode: int, stderr: str):
    def run(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, returncode, stdout="", stderr=stderr)
    return run


def test_py_spy_permission_error_is_classified_as_denied():
    # GIVEN py-spy refusing to attach WHEN a dump is asked for THEN a "denied" StackError
    pyspy = PySpy("/bin/py-spy", run=fake_run(1, PY_SPY_DENIED))
    with pytest.raises(StackError) as err:
        pyspy.dump(1234)
    assert err.value.kind == "denied"


def test_every_rank_denied_raises_the_ptrace_help():
    # GIVEN a capture where every rank's stack was refused
    ranks = tuple(ProcessInfo(pid=pid, ppid=1, role=Role.RANK, cmdline=("python",), exe=None, start_time=0.0,
                              rank=i) for i, pid in enumerate((10, 11)))
    job = Job(run_id=None, master_addr=None, master_port=None, world_size=2, launcher_pid=None, processes=ranks)
    samples = tuple(ProcSample(pid=p.pid, alive=True, errors=("stack: could not collect: Permission Denied",))
                    for p in ranks)
    snapshot = Snapshot(time=0.0, took_s=0.0, processes=samples, gpu=GpuState(status="unavailable"))
    # WHEN checked THEN the error explains ptrace_scope, SYS_PTRACE and the job's user
    with pytest.raises(PtraceDenied) as err:
        require_stacks(snapshot, job)
    text = str(err.value)
    assert "ptrace_scope" in text and "SYS_PTRACE" in text and "job's user" in text
    assert err.value.exit_code == 2


def test_missing_py_spy_says_how_to_install_it(tmp_path):
    with pytest.raises(PySpyMissing, match="pip install py-spy"):
        find_py_spy(str(tmp_path / "no-py-spy"))


def test_a_process_of_another_user_gets_one_line_that_says_whose_it_is(tmp_path):
    # GIVEN a Python process of root and hangdoc running as nobody
    import os
    import shutil

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run hangdoc as another user")
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        # WHEN nobody watches it
        done = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                               sys.executable, "-m", "hangdoc", "watch", str(target.pid), "--once",
                               "--out", "/tmp/hangdoc-nobody-test.json"],
                              capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})
        # THEN exit 2, one line naming the fix
        assert done.returncode == 2, done.stderr
        assert "another user" in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    finally:
        target.kill()
        target.wait()
