"""SIGHUP (an ssh session that dropped, a CI runner that closed its terminal) is a SIGTERM to every
command (issue 45, item 1): `watch` and `run` keep the report and the bundle and exit 143, `run`
ends the job it started, every process of it, and `report` exits 143 with one line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from conftest import hangdoc_cmd

pytestmark = [pytest.mark.integration]

STUCK = "import time; print('up', flush=True); time.sleep(1000)"


def hangup_reaches_it() -> None:
    """In a child before it runs: SIGHUP as a terminal that closed delivers it (a suite started
    under nohup ignores it, and an ignored signal is inherited)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


class Hangdoc:
    """`hangdoc ARGS` as a real process in a session of its own; its stderr read as it comes."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([*hangdoc_cmd(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True, preexec_fn=hangup_reaches_it,
                                     env=dict(os.environ, NO_COLOR="1", COLUMNS="120", GITHUB_STEP_SUMMARY=""))
        self.errors: list[str] = []
        self._reader = threading.Thread(target=lambda: self.errors.extend(iter(self.proc.stderr.readline, "")),
                                        daemon=True)
        self._reader.start()

    def wait_for(self, words: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not any(words in line for line in self.errors):
            assert self.proc.poll() is None, "".join(self.errors)[-2000:]
            time.sleep(0.2)
        assert any(words in line for line in self.errors), "".join(self.errors)[-2000:]

    def hang_up(self) -> tuple[int, str, str]:
        self.proc.send_signal(signal.SIGHUP)
        out = self.proc.stdout.read()
        self.proc.wait(timeout=60)
        self._reader.join(10)
        return self.proc.returncode, out, "".join(self.errors)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.timeout(120)
def test_run_hung_up_ends_its_job_and_keeps_the_report_bundle_and_junit(tmp_path):
    # GIVEN `hangdoc run` of a shell script that leaves a `sleep` behind and becomes a stuck Python process
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\nsleep 1000 &\nexec {sys.executable} -c \"{STUCK}\"\n")
    script.chmod(0o755)
    bundle, junit = tmp_path / "r.zst", tmp_path / "result.xml"
    run = Hangdoc("run", "--interval", "0.5", "--no-gpu", "--out", str(bundle), "--junit", str(junit), "--", str(script))
    try:
        run.wait_for(" sample ")
        job = [p for p in psutil.Process(run.proc.pid).children(recursive=True)
               if "sleep" in " ".join(p.cmdline()) or "time.sleep(1000)" in " ".join(p.cmdline())]
        assert len(job) == 2, job
        # WHEN its terminal hangs up
        rc, out, err = run.hang_up()
        # THEN it leaves as on SIGTERM: 143, the report so far, the bundle, the JUnit error, and no job left
        assert rc == 143, err[-2000:]
        assert "INTERRUPTED" in out, out[-2000:]
        assert bundle.exists() and junit.exists() and 'errors="1"' in junit.read_text()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(_gone(p) for p in job):
            time.sleep(0.2)
        assert all(_gone(p) for p in job), [p.cmdline() for p in job if not _gone(p)]
    finally:
        run.kill()
        for proc in psutil.process_iter(["cmdline"]):
            if str(tmp_path) in " ".join(proc.info["cmdline"] or ()) or "time.sleep(1000)" in " ".join(
                    proc.info["cmdline"] or ()):
                proc.kill()


@pytest.mark.timeout(90)
def test_watch_hung_up_keeps_the_report_and_the_bundle(tmp_path):
    # GIVEN `hangdoc watch --single` of a stuck Python process
    job = subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, text=True)
    bundle = tmp_path / "w.zst"
    try:
        job.stdout.readline()
        watch = Hangdoc("watch", str(job.pid), "--single", "--interval", "0.5", "--no-gpu", "--out", str(bundle))
        try:
            watch.wait_for(" sample ")
            # WHEN its terminal hangs up
            rc, out, err = watch.hang_up()
        finally:
            watch.kill()
        # THEN 143, the report so far and the bundle, as on SIGTERM (it died with 129, the bundle lost)
        assert rc == 143, err[-2000:]
        assert "INTERRUPTED" in out and bundle.exists(), err[-2000:]
    finally:
        job.kill()
        job.wait()


REPORT_HUNG_UP = """
import os, signal, sys, time
import hangdoc.inputs.evidence as inputs
from hangdoc.cli import main

def reading(*args, **kwargs):        # the terminal hangs up while the report is being made
    os.kill(os.getpid(), signal.SIGHUP)
    time.sleep(5)
    raise AssertionError("SIGHUP did not stop the report")

inputs.report_inputs = reading
sys.exit(main(["report", sys.argv[1]]))
"""


@pytest.mark.timeout(60)
def test_report_hung_up_is_a_documented_code_and_one_line(tmp_path):
    # GIVEN `hangdoc report` of a bundle, in its own process
    bundle = os.path.join(os.path.dirname(__file__), "..", "golden", "barrier-mismatch", "bundle.json")
    # WHEN a SIGHUP comes while it reads
    done = subprocess.run([sys.executable, "-c", REPORT_HUNG_UP, bundle], capture_output=True, text=True,
                          timeout=30, preexec_fn=hangup_reaches_it)
    # THEN it exits 143, as on SIGTERM (it died with 129, a code no page lists), with one line
    assert done.returncode == 143, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == ["hangdoc: interrupted"]


@pytest.mark.timeout(90)
def test_watch_whose_terminal_closes_keeps_the_bundle(tmp_path):
    # GIVEN `hangdoc watch` whose controlling terminal is a pty, as over ssh, watching a stuck process
    import fcntl
    import pty
    import termios

    job = subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, text=True)
    bundle = tmp_path / "w.zst"
    master, slave = pty.openpty()

    def own_terminal() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        hangup_reaches_it()

    try:
        job.stdout.readline()
        watch = subprocess.Popen([*hangdoc_cmd(), "watch", str(job.pid), "--single", "--interval", "0.5", "--no-gpu",
                                  "--out", str(bundle)], stdin=slave, stdout=slave, stderr=slave,
                                 preexec_fn=own_terminal, env=dict(os.environ, NO_COLOR="1", COLUMNS="120"))
        os.close(slave)
        seen = b""
        deadline = time.monotonic() + 60
        while b" sample " not in seen and time.monotonic() < deadline:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
        assert b" sample " in seen, seen[-2000:]
        # WHEN the terminal goes away (the ssh session dropped): the kernel sends SIGHUP, and every
        # write to the terminal from then on fails
        os.close(master)
        rc = watch.wait(timeout=60)
        # THEN 143, and the bundle saved all the same
        assert rc == 143 and bundle.exists(), rc
    finally:
        if "watch" in locals() and watch.poll() is None:
            watch.kill()
            watch.wait()
        job.kill()
        job.wait()
