"""`run` ends every process its job made, a double-forked daemon (`fork(); setsid(); fork(); exec`)
included, on every ending, and names each: hangdoc is its subreaper, so the daemon is re-parented
to it instead of to init and found among its children in a session of its own."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

DAEMON = """
import os, sys, time
pidfile = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(pidfile + ".tmp", "w").write(str(os.getpid()))
        os.rename(pidfile + ".tmp", pidfile)
        os.execvp("sleep", ["sleep", "300"])
    os._exit(0)
os.wait()
while not os.path.exists(pidfile):
    time.sleep(0.05)
if sys.argv[2] == "stay":
    time.sleep(300)
"""


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start_run(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, Path]:
    pidfile = tmp_path / "daemon.pid"
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    run = subprocess.Popen([sys.executable, "-m", "hangdoc", "run", "--no-gpu", "--interval", "0.5", "--format",
                            "markdown", "--", sys.executable, "-c", DAEMON, str(pidfile), mode],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return run, pidfile


def daemon_pid(pidfile: Path, limit: float = 20.0) -> int:
    deadline = time.monotonic() + limit
    while not pidfile.exists():
        assert time.monotonic() < deadline, "the daemon never started"
        time.sleep(0.05)
    return int(pidfile.read_text())


@pytest.mark.timeout(60)
def test_a_double_forked_daemon_is_ended_when_the_command_ends(tmp_path):
    # GIVEN a command that double-forks a daemon (its own session, its parent gone) and exits 0
    run, pidfile = start_run(tmp_path, "exit")
    pid = None
    try:
        out, err = run.communicate(timeout=45)
        pid = daemon_pid(pidfile, 0)
        # THEN the command's 0, the daemon is gone, and the report names it as ended
        assert run.returncode == 0, err[-2000:]
        assert not running(pid)
        assert "outlived-job" in out and f"pid {pid}: sleep 300 (ended by hangdoc)" in out, out[-2000:]
    finally:
        run.kill()
        if pid is not None and running(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(60)
def test_a_double_forked_daemon_is_ended_when_run_is_stopped_by_a_signal(tmp_path):
    # GIVEN a running command that double-forked a daemon
    run, pidfile = start_run(tmp_path, "stay")
    pid = None
    try:
        pid = daemon_pid(pidfile)
        time.sleep(1.0)
        # WHEN run gets SIGTERM (a CI runner's cancel)
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=45)
        # THEN it leaves with 143 and the daemon is gone too
        assert run.returncode == 143, err[-2000:]
        assert not running(pid)
    finally:
        run.kill()
        if pid is not None and running(pid):
            os.kill(pid, signal.SIGKILL)
