"""`hangdoc demo` in an install without torch (a tool venv) says torch is needed: one line, exit 2."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.timeout(60)
def test_demo_where_torch_does_not_import_says_so_in_one_line(tmp_path):
    # GIVEN a Python where `import torch` fails, as in a venv without it: a torch package that raises
    shim = tmp_path / "shim" / "torch"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text('raise ImportError("No module named \'torch\'")\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "shim"), NO_COLOR="1", COLUMNS="200")
    # WHEN `hangdoc demo` runs there
    done = subprocess.run([sys.executable, "-m", "hangdoc", "demo"], capture_output=True, text=True, env=env,
                          timeout=50)
    # THEN it exits 2 with one line that says torch is needed and how to get it; no job, no CRASH
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs torch" in lines[0] and "[torch]" in lines[0], lines
    assert "CRASH" not in done.stdout + done.stderr and "Traceback" not in done.stderr
