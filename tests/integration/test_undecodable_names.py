"""Names from /proc are bytes: a process whose open file, working directory, command line, thread
name and environment hold bytes that are not UTF-8 (legacy encodings are common in speech
corpora) is captured, saved and reported, each such byte kept as `\\xNN` (docs/bundle.md)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import Watch, hangdoc_cmd
from hangdoc.bundle.files import load_bundle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# The process: cwd and an open file under a Latin-1 directory name, a thread named with a Latin-1
# byte (prctl writes /proc/PID/task/TID/comm), a TORCH_ variable and an argument that are not UTF-8.
HOLDER = r"""
import ctypes, os, sys, threading, time
os.chdir(os.fsencode(sys.argv[1]))
held = open(b"caf\xe9.bin", "wb")
def named():
    ctypes.CDLL(None).prctl(15, b"w\xe9rker", 0, 0, 0)
    time.sleep(600)
threading.Thread(target=named, daemon=True).start()
time.sleep(0.3)
open(os.path.join(os.fsencode(sys.argv[1]), b"ready"), "w").close()
time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path):
    """GIVEN a Python process holding names that are not UTF-8; killed, its whole session, after."""
    place = os.path.join(os.fsencode(str(tmp_path)), b"d\xe9j\xe0")
    os.mkdir(place)
    env = dict(os.environ)
    env_b = {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    env_b[b"TORCH_NOTE"] = b"caf\xe9"
    proc = subprocess.Popen([sys.executable.encode(), b"-c", HOLDER.encode(), place, b"--tag=\xff"],
                            env=env_b, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(place, b"ready")):
            assert proc.poll() is None and time.monotonic() < deadline, "the holder did not start"
            time.sleep(0.05)
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_watch_once_saves_and_reports_names_that_are_not_utf8(holder, tmp_path):
    # WHEN `watch --once` captures it
    out = tmp_path / "b.json"
    env = dict(os.environ, NO_COLOR="1")
    done = subprocess.run([*hangdoc_cmd(), "watch", str(holder.pid), "--once", "--single", "--no-gpu",
                           "--out", str(out)], capture_output=True, text=True, timeout=90, env=env)
    # THEN it saves the bundle (exit 0, no traceback), with every such byte kept as \xNN
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    text = out.read_text()
    assert "caf\\\\xe9.bin" in text and "d\\\\xe9j\\\\xe0" in text, "the open file and the cwd"
    assert "--tag=\\\\xff" in text, "the command line"
    bundle = load_bundle(out)
    proc = bundle.samples[-1].processes[0].proc
    assert any(f.path.endswith("d\\xe9j\\xe0/caf\\xe9.bin") for f in proc.open_files)
    assert "w\\xe9rker" in proc.thread_names
    assert bundle.job.processes[0].env.get("TORCH_NOTE") == "caf\\xe9"
    # AND the report prints it
    shown = subprocess.run([*hangdoc_cmd(), "report", str(out), "--format", "json"], capture_output=True,
                           text=True, timeout=60, env=env)
    assert shown.returncode in (0, 2, 3, 5, 7) and "Traceback" not in shown.stderr, shown.stderr
    assert json.loads(shown.stdout)


def test_ctrl_c_on_a_watch_of_such_names_exits_130_and_keeps_the_bundle(holder, tmp_path):
    # GIVEN a full watch of the process
    out = tmp_path / "b.json"
    watch = Watch(holder.pid, out, "--single", "--hang-after", "600")
    try:
        watch.wait_for_samples(1)
        # WHEN it is stopped with Ctrl-C
        watch.proc.send_signal(signal.SIGINT)
        rc, stdout, stderr = watch.finish()
    finally:
        watch.kill()
    # THEN exit 130, the report so far, and the bundle saved
    assert rc == 130 and "Traceback" not in stderr, stderr
    assert json.loads(stdout)["verdict"] == "interrupted"
    assert load_bundle(out).samples
