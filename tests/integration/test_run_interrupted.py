"""`hangdoc run` stopped by Ctrl-C or SIGTERM: the job is ended, the report so far printed, the
bundle and the JUnit result written, and the documented exit code (130 / 143)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from conftest import ctrl_c_reaches_it

pytestmark = [pytest.mark.integration]

SLEEPER = "import time; print('up', flush=True); time.sleep(600)"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_run_stopped_by_a_signal_keeps_its_report_bundle_and_junit(tmp_path, sig, code):
    # GIVEN hangdoc run watching a lone Python process that sleeps
    bundle, junit = tmp_path / "b.hangdoc", tmp_path / "result.xml"
    run = subprocess.Popen([sys.executable, "-m", "hangdoc", "run", "--interval", "0.5", "--no-gpu",
                            "--out", str(bundle), "--junit", str(junit), "--", sys.executable, "-c", SLEEPER],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env=dict(os.environ, NO_COLOR="1"), preexec_fn=ctrl_c_reaches_it)
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(iter(run.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        job = []
        while time.monotonic() < deadline and not (job and any(" sample " in line for line in errors)):
            job = job or [c for c in psutil.Process(run.pid).children(recursive=True)
                          if "time.sleep(600)" in " ".join(c.cmdline())]
            time.sleep(0.2)
        assert job and any(" sample " in line for line in errors), "the command was never watched: " + "".join(errors)
        # WHEN the signal arrives, the run having sampled the command
        run.send_signal(sig)
        out = run.stdout.read()
        run.wait(timeout=60)
        reader.join(10)
        err = "".join(errors)
        # THEN the documented code, the report so far, the bundle, the JUnit error, and no job left
        assert run.returncode == code, err[-2000:]
        assert "INTERRUPTED" in out, out[-2000:]
        assert bundle.exists() and junit.exists()
        assert 'errors="1"' in junit.read_text()
        assert not job[0].is_running() or job[0].status() == psutil.STATUS_ZOMBIE
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
