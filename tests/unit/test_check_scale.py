"""`check data` at realistic sizes: a fast header walk that agrees with tarfile, progress on
stderr for long passes, and findings bounded in text and Markdown (all of it in JSON)."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import tarfile

import pytest

from hangdoc.check.data import check_data
from hangdoc.check.progress_bar import Progress
from hangdoc.render.check_json import render_json
from hangdoc.render.check_markdown import render_markdown
from hangdoc.render.check_text import render_text
from hangdoc.render.finding import MAX_EVIDENCE_LINES
from hangdoc.check.sections import layout
from factories import write_list, write_shard
from hangdoc.check.tarscan import fast_members


def members_by_tarfile(path):
    with tarfile.open(path) as tar:
        return [(m.name, m.isfile()) for m in tar.getmembers()]


@pytest.mark.parametrize("keys,extra", [
    ([f"utt{i}" for i in range(1000)], ()),
    (["a" * 120, "dir/sub/" + "b" * 90], ()),            # ustar prefix, or a GNU long name (fallback)
    (["x"], ("stray.json",)),
])
def test_the_fast_header_walk_agrees_with_tarfile(tmp_path, keys, extra):
    path = write_shard(tmp_path / "s.tar", keys, wav_bytes=300, extra=extra)
    with open(path, "rb") as f:
        fast = fast_members(f, os.path.getsize(path))
    # THEN it reads what tarfile reads, or leaves the shard to tarfile (None)
    assert fast is None or fast == members_by_tarfile(path)


def test_a_truncated_shard_is_left_to_tarfile(tmp_path):
    path = write_shard(tmp_path / "s.tar", [f"u{i}" for i in range(20)], wav_bytes=3000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with open(path, "rb") as f:
        assert fast_members(f, os.path.getsize(path)) is None


def test_long_passes_report_progress_on_stderr_only():
    # GIVEN a pass over 1,000 items, not on a terminal
    out = io.StringIO()
    ticks = iter(range(0, 10_000, 20))
    progress = Progress("check data: reading shard headers", out, clock=lambda: next(ticks))
    for done in range(64, 1001, 64):
        progress(done, 1000)
    progress(1000, 1000)
    progress.close()
    # THEN a line every few seconds and one at the end; short passes say nothing
    lines = out.getvalue().splitlines()
    assert lines and lines[-1].endswith("1,000 of 1,000")
    quiet = io.StringIO()
    Progress("x", quiet)(5, 10)
    assert quiet.getvalue() == ""


def test_findings_are_bounded_in_text_and_markdown_and_whole_in_json(tmp_path):
    # GIVEN a list of 300 shards that do not exist
    data_list = write_list(tmp_path / "data.list", [str(tmp_path / f"missing_{i}.tar") for i in range(300)])
    result = check_data([data_list], 4, 2, sample=0)
    # (a rule that lists every hit, as the unpaired-member and bad-list-entry rules do)
    finding = dataclasses.replace(result.findings[0], evidence=tuple(f"missing_{i}" for i in range(300)))
    result = dataclasses.replace(result, findings=(finding,))
    doc = layout(result)
    text, md, js = io.StringIO(), io.StringIO(), io.StringIO()
    render_text(doc, text, width=200)
    render_markdown(doc, md)
    render_json(result, js)
    # THEN text and Markdown show at most MAX_EVIDENCE_LINES lines a finding, and say where the rest is
    for out in (text.getvalue(), md.getvalue()):
        assert sum("missing_" in line and ".tar" not in line for line in out.splitlines()) <= MAX_EVIDENCE_LINES
        assert "more (all of them: --format json)" in out
        assert "ranks 0-3" in out
    missing = next(f for f in json.loads(js.getvalue())["findings"] if f["rule"] == "missing-shard")
    assert len(missing["evidence"]) == 300
