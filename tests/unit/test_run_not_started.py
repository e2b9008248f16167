"""A command that cannot start still leaves what `run` promises whatever the end: the bundle (which
replays as a failed command), the JUnit result and the step summary, each saying why; exit 2."""
from __future__ import annotations

import os
import subprocess
import sys
from xml.etree import ElementTree as ET

from hangdoc.bundle.files import load_bundle
from hangdoc.report import judge


def test_a_command_that_cannot_start_leaves_the_bundle_junit_and_summary(tmp_path):
    # GIVEN a command that does not exist, and every output named
    summary = tmp_path / "summary.md"
    summary.write_text("")
    env = dict(os.environ, NO_COLOR="1", GITHUB_STEP_SUMMARY=str(summary))
    # WHEN run
    done = subprocess.run([sys.executable, "-m", "hangdoc", "run", "--out", str(tmp_path / "b.json"),
                           "--junit", str(tmp_path / "j.xml"), "--", str(tmp_path / "nonexistent" / "cmd")],
                          capture_output=True, text=True, env=env, timeout=60)
    # THEN it exits 2, and each output says the command could not start
    assert done.returncode == 2, done.stderr
    why = "could not start"
    assert why in done.stdout
    case = ET.parse(tmp_path / "j.xml").getroot().find("testcase")
    assert case.find("failure") is not None and why in case.find("failure").text
    assert why in summary.read_text()
    bundle = load_bundle(tmp_path / "b.json")
    assert any("No such file or directory" in line for log in bundle.logs for line in log.lines)
    assert judge(bundle).report.verdict.value == "crash"
