"""hangdoc/bundle-v2: interned frames and stacks, zstd on disk; v1 bundles still read the same."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hangdoc.report import judge
from factories import node_bundle, save_node
from hangdoc.bundle.files import load_bundle, load_bundles
from hangdoc.base.errors import EXIT_USAGE, BadBundle
from hangdoc.render.json import report_json
from hangdoc.render.markdown import report_markdown
from hangdoc.render.text import render_text

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "bundle.json").is_file())
ROOT = Path(__file__).resolve().parents[2]


def every_format(bundle) -> tuple[str, str, str]:
    report = judge(bundle).report
    text = io.StringIO()
    render_text(report, text, width=160)
    return report_json(report), report_markdown(report), text.getvalue()


@pytest.mark.parametrize("name", CASES)
def test_a_golden_v1_bundle_saved_as_v2_gives_the_same_report(name, tmp_path):
    # GIVEN a v1 golden bundle WHEN it is saved as v2 (.json.zst) and read back
    v1 = load_bundle(GOLDEN / name / "bundle.json")
    v2 = load_bundle(save_node(v1, tmp_path / "b.json.zst"))
    # THEN it is the same bundle, and the report is the same in every format
    assert v2 == v1
    assert every_format(v2) == every_format(v1)


def test_v2_is_compressed_and_interned_and_round_trips(tmp_path):
    # GIVEN a node of 8 ranks x 8 workers, 3 samples
    bundle = node_bundle(0, 2, 3, 1.7e9)
    # WHEN saved zstd-compressed and as plain v2 JSON
    packed = save_node(bundle, tmp_path / "n.json.zst")
    plain = save_node(bundle, tmp_path / "n.json")
    # THEN both read back equal; the plain one is JSON with each distinct frame once
    assert load_bundle(packed) == bundle == load_bundle(plain)
    doc = json.loads(plain.read_text())
    assert doc["schema"] == "hangdoc/bundle-v2"
    assert len(doc["frames"]) == len({f for s in bundle.samples for p in s.processes if p.stack
                                      for t in p.stack.threads for f in t.frames})
    assert packed.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    assert packed.stat().st_size * 20 < len(json.dumps(json.loads(load_v1_text(bundle))))


def load_v1_text(bundle) -> str:
    from hangdoc.base.serde import to_json

    return to_json(bundle).decode()


def test_nodes_merged_share_their_frames(tmp_path):
    # GIVEN two nodes' v2 bundles WHEN merged
    for n in range(2):
        save_node(node_bundle(n, 2, 9, 1.7e9, workers=2), tmp_path / f"node{n}.json.zst")
    merged = load_bundles([tmp_path])
    # THEN the all_reduce frames of ranks on both nodes are one object
    tops = {id(s.stack.main.frames[0]) for s in merged.last.processes
            if s.stack and s.stack.main.frames[0].name == "all_reduce"}
    assert len(tops) == 1 and judge(merged).report.culprit_ranks == (9,)


def hangdoc_report(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangdoc", "report", str(path)], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


def test_a_truncated_or_corrupt_zst_gives_one_line_and_exit_2(tmp_path):
    # GIVEN a v2 bundle cut in half, and one with bytes flipped in the middle
    data = save_node(node_bundle(0, 1, 3, 1.7e9, workers=2), tmp_path / "b.json.zst").read_bytes()
    cut = tmp_path / "cut.json.zst"
    cut.write_bytes(data[: len(data) // 2])
    bad = tmp_path / "bad.json.zst"
    bad.write_bytes(data[:40] + bytes(b ^ 0xFF for b in data[40:80]) + data[80:])
    for path in (cut, bad):
        # WHEN hangdoc reports on it
        done = hangdoc_report(path)
        # THEN one line names the file, no traceback, exit 2
        assert done.returncode == EXIT_USAGE, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in done.stderr
        with pytest.raises(BadBundle):
            load_bundle(path)


def test_a_damaged_v2_field_is_named_by_its_json_path(tmp_path):
    # GIVEN a v2 bundle whose first rank's pid is a string
    path = save_node(node_bundle(0, 1, 3, 1.7e9, workers=1), tmp_path / "b.json")
    doc = json.loads(path.read_text())
    doc["bundle"]["job"]["processes"][1]["pid"] = "x"
    doc["stacks"][0]["threads"][0]["frames"] = [10 ** 6]
    path.write_text(json.dumps(doc))
    # WHEN read THEN the error says where
    with pytest.raises(BadBundle, match=r"damaged: .*\$\.stacks\[0\]\.threads\[0\]\.frames"):
        load_bundle(path)
    doc = json.loads(path.read_text())
    doc["stacks"][0]["threads"][0]["frames"] = [0]
    path.write_text(json.dumps(doc))
    with pytest.raises(BadBundle, match=r"\$\.bundle\.job\.processes\[1\]\.pid"):
        load_bundle(path)
