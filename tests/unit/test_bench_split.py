"""The scale benchmark's stage split (`make bench`, section merge) runs end to end on a small job."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_scale_benchmark_times_each_stage_of_a_folded_report():
    # GIVEN the scale benchmark at 128 ranks (16 node bundles: past the fold, so report DIR folds)
    # WHEN it runs with its stage split, as `make bench` runs it
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_merge", "--scale", "128", "--split"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=dict(os.environ, NO_COLOR="1"))
    # THEN it ends well, prints the stage table, and the split reaches the report's own verdict and culprit
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].split()[:5] == ["ranks", "digests", "classes", "analyse", "rules"]
    row = json.loads(lines[-1])
    stages = row["stages"]
    assert (row["verdict"], row["culprits"]) == ("hang", [65])
    assert (stages["verdict"], stages["culprits"]) == (row["verdict"], row["culprits"])
    assert stages["rows"] >= 2 and stages["nodes_read_whole"] >= 1
    assert all(stages[k] >= 0 for k in ("load_s", "classes_s", "analyse_s", "rules_s", "render_s"))
