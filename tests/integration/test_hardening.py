"""Never lose the evidence, never say something false: real watch processes stopped by signals,
a save that fails late, and a crash whose output goes to a terminal (a real pty)."""
from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import threading
import time

import pytest

from conftest import JOBS, Watch, hangdoc_cmd
from hangdoc.bundle.files import load_bundle
from hangdoc.scenarios.launch import RunningJob, stop_job, torchrun_cmd, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stopping_a_watch_keeps_the_report_and_the_bundle(stall_job, tmp_path, sig, code):
    # GIVEN a watch sampling a job that trains slowly and never hangs
    job = stall_job("slow", wait_fault=False)
    out = tmp_path / "bundle.json"
    watch = Watch(job.pid, out, "--hang-after", "60")
    try:
        watch.wait_for_samples(2)
        # WHEN it is stopped by Ctrl-C (SIGINT) or SIGTERM
        watch.proc.send_signal(sig)
        rc, stdout, stderr = watch.finish()
    finally:
        watch.kill()
    # THEN it prints the report so far, saves the bundle and exits 130 / 143
    assert rc == code, stderr
    report = json.loads(stdout)
    assert report["verdict"] == "interrupted" and len(report["ranks"]) == 2
    assert "bundle saved to" in stderr and "Traceback" not in stderr
    assert len(load_bundle(out).samples) >= 2


def test_a_save_that_fails_late_prints_the_report_first(stall_job, tmp_path):
    # GIVEN a watch on a hung job whose --out directory vanishes after the watch began
    job = stall_job("compute")
    place = tmp_path / "gone"
    place.mkdir()
    watch = Watch(job.pid, place / "bundle.json", "--hang-after", "3")
    try:
        watch.wait_for_samples(1)
        shutil.rmtree(place)
        # WHEN the hang is declared and the bundle cannot be written
        rc, stdout, stderr = watch.finish()
    finally:
        watch.kill()
    # THEN the report is on stdout, the failure is one line, and the exit code says so (6)
    assert rc == 6, stderr
    assert json.loads(stdout)["verdict"] == "hang"
    failed = [line for line in stderr.splitlines() if "not saved" in line]
    assert len(failed) == 1 and failed[0].startswith("hangdoc: error: ") and "Traceback" not in stderr


def test_a_worker_segfault_with_output_on_a_terminal_is_not_healthy(tmp_path):
    # GIVEN a real job whose output goes to a terminal (a pty), so no log file can be read
    master, slave = pty.openpty()
    gate = tmp_path / "go"
    cmd = torchrun_cmd(JOBS / "stall_job.py", "--workdir", str(tmp_path), "--mode", "segfault", "--gate", str(gate))
    popen = subprocess.Popen(cmd, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                             start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"))
    os.close(slave)
    terminal: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            terminal.append(chunk)

    threading.Thread(target=drain, daemon=True).start()
    job = RunningJob(popen)
    watch = None
    try:
        assert wait_for([tmp_path / "ready.0", tmp_path / "ready.1"], job, timeout=60), b"".join(terminal)[-2000:]
        job.refresh_tree()
        watch = Watch(job.pid, tmp_path / "bundle.json", "--hang-after", "30")
        watch.wait_for_samples(1)
        # WHEN rank 1's DataLoader worker dies by SIGSEGV and torchrun ends the job
        gate.write_text("go")
        rc, stdout, stderr = watch.finish()
    finally:
        if watch is not None:
            watch.kill()
        stop_job(job)
        os.close(master)
    # THEN the verdict is a crash or "ended, cause unknown", never HEALTHY with exit 0
    report = json.loads(stdout)
    print("segfault on a terminal:", report["verdict"], report["culprit_ranks"], [f["rule"] for f in report["findings"]])
    assert report["verdict"] in ("crash", "ended"), stderr
    assert rc == {"crash": 4, "ended": 5}[report["verdict"]]
    assert (tmp_path / "bundle.json").is_file()


def fake_py_spy(tmp_path, kind: str) -> str:
    path = tmp_path / f"py-spy-{kind}"
    if kind == "wrong-binary":
        path.write_bytes(b"\x7fELF\x02\x01\x01garbage-for-another-machine" + bytes(64))
    elif kind == "garbage":
        path.write_text("#!/bin/sh\necho 'this is not json'\n")
    elif kind == "crash":
        path.write_text("#!/bin/sh\nkill -SEGV $$\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("kind,words", [("wrong-binary", "does not run here"), ("garbage", "not its JSON"),
                                        ("crash", "py-spy crashed")])
def test_once_never_reports_success_when_every_stack_failed(stall_job, tmp_path, kind, words):
    # GIVEN a live job and a py-spy that fails in a way other than a ptrace refusal
    job = stall_job("slow", wait_fault=False)
    env = dict(os.environ, NO_COLOR="1")
    # WHEN `watch --once` captures it
    done = subprocess.run([*hangdoc_cmd(), "watch", str(job.pid), "--once", "--no-gpu", "--py-spy",
                           fake_py_spy(tmp_path, kind), "--out", str(tmp_path / "b.json")],
                          capture_output=True, text=True, timeout=120, env=env)
    # THEN it fails (exit 2) and says why for the ranks, not "captured" and exit 0
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr
