"""`watch --record DIR` on a real hung job, then `hangdoc replay DIR`: the live report, byte for byte."""
from __future__ import annotations

import json
import os
import stat

import pytest

from conftest import run_hangdoc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

FAST = ("--interval", "0.5", "--hang-after", "4", "--no-live", "--no-gpu", "--format", "json")


def test_a_recorded_watch_replays_to_the_live_report_byte_for_byte(stall_job, tmp_path):
    # GIVEN a real torchrun job whose ranks wait in different collectives, watched with --record
    job = stall_job("mismatch")
    recording = tmp_path / "recording"
    live = run_hangdoc("watch", str(job.pid), *FAST, "--out", str(tmp_path / "bundle.json"),
                       "--record", str(recording))
    assert live.returncode == 3, live.stderr
    # WHEN the recording is replayed, twice
    first = run_hangdoc("replay", str(recording), "--format", "json")
    second = run_hangdoc("replay", str(recording), "--format", "json")
    # THEN each replay prints the live report byte for byte, with its exit code
    assert first.returncode == second.returncode == 3, first.stderr
    assert first.stdout == second.stdout == live.stdout
    # AND says the verdict came at the round the live watch stopped at, the detection time the live one
    report = json.loads(live.stdout)
    line = first.stderr.strip().splitlines()[-1]
    assert f"HANG at round {report['samples']} " in line and "where the live watch stopped too" in line, line
    assert json.loads(first.stdout)["detected_after_s"] == report["detected_after_s"]
    # AND the recording is the watch's own: a file of its own, 0600, in a directory made 0700
    assert stat.S_IMODE(os.stat(recording).st_mode) == 0o700
    assert sorted(os.listdir(recording)) == ["recording.zst"]
    assert stat.S_IMODE(os.stat(recording / "recording.zst").st_mode) == 0o600
    # AND a second watch never writes over it
    again = run_hangdoc("watch", str(job.pid), *FAST, "--record", str(recording), "--timeout", "5")
    assert again.returncode == 2 and "holds a recording already" in again.stderr, again.stderr
