"""Text, Markdown and JSON output of `hangdoc check`."""
from __future__ import annotations

import io
import json

import pytest

from hangdoc.check.data import check_data
from hangdoc.check.env import check_env
from hangdoc.check.host import HostProbes
from hangdoc.check.model import CheckResult, NvmlFacts
from hangdoc.render.check_json import render_json
from hangdoc.render.check_markdown import render_markdown
from hangdoc.render.check_text import render_text
from hangdoc.check.sections import layout
from factories import write_list, write_shard
from hangdoc.base.serde import from_dict


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def seven(tmp_path) -> CheckResult:
    names = []
    for i in range(7):
        write_shard(tmp_path / f"s{i}.tar", [f"u{i}_{k}" for k in range(10)], seed=i)
        names.append(f"s{i}.tar")
    return check_data([write_list(tmp_path / "data.list", names)], 2, 2, sample=0)


def text(result: CheckResult, out: io.StringIO, width: int = 120) -> str:
    render_text(layout(result), out, width=width)
    return out.getvalue()


def test_text_is_plain_when_not_a_tty(seven, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = text(seven, io.StringIO())
    assert "\x1b[" not in out
    lines = out.splitlines()
    assert lines[0] == "hangdoc check data: 7 shards in 1 list, 2 ranks x 2 workers"
    assert lines[1] == "1 finding: 1 warning"
    assert "WARNING  uneven-shards  rank 1" in lines
    assert ("  rank 1 gets as few as 30 utterances, rank 0 gets 40 (spread 10, 25 %): "
            "ranks leave the epoch at different times") in lines


def test_text_is_coloured_on_a_tty_and_plain_with_no_color(seven, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b[" in text(seven, Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in text(seven, Tty())


def test_text_shows_the_snippet_under_the_fix(seven, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    out = text(seven, io.StringIO())
    assert "      from torch.distributed.algorithms.join import Join" in out.splitlines()


def test_markdown_renders_a_finding_and_a_table(seven):
    out = io.StringIO()
    render_markdown(layout(seven), out)
    md = out.getvalue()
    assert md.startswith("## hangdoc check data: 7 shards in 1 list, 2 ranks x 2 workers\n")
    assert "### WARNING `uneven-shards` (rank 1)" in md
    assert "**Fix:** Make the shard count a multiple of world_size x num_workers" in md
    assert "| rank | shards | utterances | size | none |" in md


def test_json_round_trips_through_serde(seven, tmp_path):
    out = io.StringIO()
    render_json(seven, out)
    assert from_dict(CheckResult, json.loads(out.getvalue())) == seven
    env = check_env(num_workers=2, probes=HostProbes(arch="aarch64", env={}, nvml=lambda: NvmlFacts(False, "none")))
    out = io.StringIO()
    render_json(env, out)
    assert from_dict(CheckResult, json.loads(out.getvalue())) == env
