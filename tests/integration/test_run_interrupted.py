"""`hangdoc run` stopped by Ctrl-C or SIGTERM: the job is ended, the report so far printed, the
bundle and the JUnit result written, and the documented exit code (130 / 143)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

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
                           env=dict(os.environ, NO_COLOR="1"))
    try:
        deadline = time.monotonic() + 40
        job = []
        while time.monotonic() < deadline and not job:
            job = [c for c in psutil.Process(run.pid).children(recursive=True)
                   if "time.sleep(600)" in " ".join(c.cmdline())]
            time.sleep(0.2)
        assert job, "the command never started"
        time.sleep(5)              # a few samples of it
        # WHEN the signal arrives
        run.send_signal(sig)
        out, err = run.communicate(timeout=60)
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
