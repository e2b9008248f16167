"""The HTML report and the lanes it draws, on the golden bundles (real torchrun jobs): one
self-contained page whose structure is checked on every case (a lane per rank, the culprit's
marked, the verdict and every finding as the text report says them, nothing fetched, a bounded
size) and whose bytes are checked on two, expected.html. tests/integration/test_html_browser.py
opens the same page in a real browser. Re-record the two after a deliberate change:
    HANGDOC_RECORD_HTML=1 .venv/bin/python -m pytest -q tests/unit/test_html_report.py
"""
from __future__ import annotations

import html
import json
import os
import re
from dataclasses import replace
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path

import pytest

from factories import node_bundle, save_node
from hangdoc.base.serde import to_dict
from hangdoc.bundle.files import load_bundle
from hangdoc.inputs.evidence import report_from_files
from hangdoc.model import Finding, Lane, Severity, Span
from hangdoc.render.html import CSP, report_html
from hangdoc.render.html_timeline import PLOT_W
from hangdoc.render.words import headline
from hangdoc.report import judge
from hangdoc.analyze.lanes import MAX_POINTS, MAX_SPANS, spans

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "bundle.json").is_file())
EXACT = ("bz2-shards", "rank-sigkill")    # a hang with its workers, a crash whose culprit is seen gone at the verdict
MAX_PAGE_BYTES = 200_000
VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col", "source", "area", "base", "embed", "track"}


@lru_cache(maxsize=None)
def golden(name: str):
    return judge(load_bundle(GOLDEN / name / "bundle.json")).report


@lru_cache(maxsize=None)
def page(name: str) -> str:
    return report_html(golden(name))


class Elements(HTMLParser):
    """Every element of a page with its attributes and its text, and whether its tags balance."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict]] = []
        self.open: list[str] = []
        self.unbalanced: list[str] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.unbalanced.append(tag)
        else:
            self.open.pop()

    def handle_data(self, data):
        self.text.append(data)

    def with_class(self, name: str) -> list[dict]:
        return [a for _, a in self.found if name in (a.get("class") or "").split()]

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def rank_lanes(doc: Elements, kind: str = "rank") -> list[dict]:
    """The lanes of ranks (or, kind="worker", of their DataLoader workers)."""
    return [a for a in doc.with_class("lane") if kind in a["class"].split()]


# --- the lanes (the report model) -----------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_every_rank_has_a_lane_over_the_watched_time(name):
    # GIVEN a golden bundle WHEN its report is built
    report = golden(name)
    # THEN each rank row has its lane, in the same order, the culprits' marked (a job its launcher
    # restarted: the newest start's lanes; the earlier starts' follow them)
    newest = max((lane.generation for lane in report.lanes if lane.generation is not None), default=None)
    current = [lane for lane in report.lanes if lane.generation == newest]
    assert [lane.rank for lane in current] == [r.rank for r in report.ranks]
    assert {lane.rank for lane in current if lane.culprit} == set(report.culprit_ranks) & {
        r.rank for r in report.ranks}
    for lane in report.lanes:
        for each in (lane, *lane.workers):
            # AND its spans tile its time from the first sample on, no gap, no overlap
            assert each.spans and each.spans[0].start_s >= 0
            assert all(a.end_s == b.start_s for a, b in zip(each.spans, each.spans[1:]))
            assert all(s.end_s >= s.start_s for s in each.spans)
            assert all(a.state != b.state or a.detail != b.detail for a, b in zip(each.spans, each.spans[1:]))


def test_the_ranks_that_stepped_have_step_ticks_and_a_cpu_line():
    # GIVEN a healthy job that stepped while watched WHEN laid out as lanes
    report = golden("healthy-finished")
    # THEN its steps are ticks inside the watched time
    for lane in report.lanes:
        assert lane.steps and all(0 <= t <= lane.spans[-1].end_s for t in lane.steps)
    # AND a rank whose main thread's counters were read has its CPU line
    assert all(lane.cpu_pct for lane in golden("prefetch-thread-died").lanes)


def test_lanes_stay_bounded_however_long_the_watch():
    # GIVEN a rank flickering between two states for 5,000 samples
    from hangdoc.analyze.classify import Reading
    from hangdoc.analyze.timeline import Point
    from hangdoc.model import RankState

    states = (RankState.COMPUTE, RankState.COLLECTIVE)
    points = [Point(100.0 + i, Reading(states[i % 2], None, None), (), None, None) for i in range(5000)]
    # WHEN laid out as spans
    drawn = spans(points, 100.0)
    # THEN there are at most MAX_SPANS, still covering the whole time
    assert 1 < len(drawn) <= MAX_SPANS
    assert drawn[0].start_s == 0 and drawn[-1].end_s == pytest.approx(4999, abs=0.01)


def test_series_and_steps_are_capped():
    from hangdoc.analyze.lanes import _capped, _downsampled

    series = tuple((float(i), float(i % 100)) for i in range(2000))
    assert len(_downsampled(series)) <= MAX_POINTS
    assert len(_capped(tuple(float(i) for i in range(2000)))) == MAX_POINTS


def test_the_json_report_carries_the_lanes():
    # GIVEN a report WHEN printed as JSON THEN its lanes are there, as the HTML and the trace draw them
    doc = to_dict(golden("bz2-shards"))
    assert [lane["rank"] for lane in doc["lanes"]] == [0, 1]
    assert doc["lanes"][1]["culprit"] is True
    assert doc["lanes"][1]["workers"][0]["spans"][0]["state"] == "decompressing"


# --- the page ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_the_page_has_a_lane_per_rank_the_culprit_marked(name):
    # GIVEN a golden bundle WHEN rendered as HTML
    report, doc = golden(name), Elements(page(name))
    # THEN each rank has a lane element, its workers' lanes folded under it
    lanes = rank_lanes(doc)
    newest = max((lane.generation for lane in report.lanes if lane.generation is not None), default=None)
    assert [a["data-rank"] for a in lanes] == [str(lane.rank) for lane in report.lanes if lane.generation == newest]
    assert len(rank_lanes(doc, "worker")) == sum(len(lane.workers) + len(lane.retired) for lane in report.lanes)
    # AND the culprit's lane is marked, in a class and in words
    marked = {a["data-rank"] for a in lanes if "culprit" in a["class"].split()}
    assert marked == {str(lane.rank) for lane in report.lanes if lane.culprit}
    assert all(a["data-culprit"] == ("true" if a["data-rank"] in marked else "false") for a in lanes)
    assert doc.all_text.count("CULPRIT") == len(marked)
    # AND every span is drawn
    assert len(doc.with_class("span")) == sum(len(e.spans) for lane in report.lanes
                                              for e in (lane, *lane.workers, *lane.retired))


@pytest.mark.parametrize("name", CASES)
def test_the_page_says_what_the_text_report_says(name):
    # GIVEN a golden bundle WHEN rendered as HTML
    report, doc = golden(name), Elements(page(name))
    text = doc.all_text
    # THEN the verdict line and each finding's title, evidence and fix are on it, worded as the text report
    assert f"hangdoc: {headline(report)}" in text
    for f in report.findings:
        assert f.title in text and f.fix in text
        assert all(line.strip() in text for line in f.evidence)
    # AND each stack class's innermost frame is in the tree
    for cls in report.stack_classes:
        if cls.frames:
            assert html.escape(cls.frames[0].rsplit(" (", 1)[0]) in page(name)


@pytest.mark.parametrize("name", CASES)
def test_the_page_is_one_file_that_fetches_nothing(name):
    # GIVEN a golden bundle WHEN rendered as HTML
    text = page(name)
    doc = Elements(text)
    # THEN its tags balance, it has no script and refers to nothing outside itself
    assert not doc.unbalanced and not doc.open
    assert not [t for t, _ in doc.found if t in ("script", "link", "iframe", "img", "object", "embed")]
    for _, attrs in doc.found:
        for key in ("src", "href", "xlink:href", "action"):
            assert not attrs.get(key), (key, attrs)
    assert not re.search(r"url\((?!#)|@import", text)
    assert not re.search(r"\bon[a-z]+=", text)
    # AND it tells the browser so: its policy lets the inline style apply and nothing else
    policies = [a["content"] for t, a in doc.found if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert policies == [CSP]
    # AND it is small enough to attach to an issue, and ASCII whatever the job's strings held
    assert len(text.encode()) < MAX_PAGE_BYTES
    assert text.isascii()


@pytest.mark.parametrize("name", EXACT)
def test_the_page_is_the_golden_one(name):
    # GIVEN a golden bundle WHEN rendered as HTML THEN the page is expected.html, byte for byte
    path = GOLDEN / name / "expected.html"
    if os.environ.get("HANGDOC_RECORD_HTML"):
        path.write_text(page(name))
    assert page(name) == path.read_text()


def test_a_rank_seen_gone_at_the_verdict_is_drawn_right_of_the_line():
    # GIVEN a crash whose culprit (rank 1, SIGKILL) was read as exited at the last sample only
    report, doc = golden("rank-sigkill"), Elements(page("rank-sigkill"))
    last = report.lanes[1].spans[-1]
    assert last.state == "exited" and last.start_s == last.end_s
    # WHEN rendered THEN its exit is a named box right of the verdict line, not a sliver under it
    gone = doc.with_class("at-verdict")
    assert [(a["data-state"], float(a["x"]) > PLOT_W, float(a["width"]) >= 10) for a in gone] == [
        ("exited", True, True)]
    assert '<text x="919" y="14" class="at-verdict-label">exited</text>' in page("rank-sigkill")
    assert "is right of the verdict line" in doc.all_text
    # AND a lane whose last state lasted is drawn as before, nothing right of its line
    assert "right of the verdict line" not in Elements(page("bz2-shards")).all_text


def test_a_report_of_one_sample_draws_each_state_at_the_verdict():
    # GIVEN a crash hangdoc saw in one sample (worker-segfault: the worker died before the capture)
    report, doc = golden("worker-segfault"), Elements(page("worker-segfault"))
    assert report.samples == 1
    # WHEN rendered THEN every lane's one state is beside the verdict line, and no time axis is made up
    assert sorted(a["data-state"] for a in doc.with_class("at-verdict")) == ["exited", "unknown"]
    assert "1 sample over" in doc.all_text and "at the one sample hangdoc read" in doc.all_text
    ticks = [t for t in doc.text if re.fullmatch(r"[0-9.]+ s", t)]
    assert not ticks and [t for t in Elements(page("bz2-shards")).text if re.fullmatch(r"[0-9.]+ s", t)]


def test_the_stack_tree_says_where_ranks_stop_and_which_have_no_stack():
    # GIVEN classes where ranks 0-1 go deeper than rank 2, and rank 3 has no stack
    from hangdoc.model import StackClass

    classes = (StackClass((0, 1), ("all_reduce (c10d.py:10)", "step (train.py:5)", "main (train.py:1)")),
               StackClass((2,), ("step (train.py:5)", "main (train.py:1)")), StackClass((3,), ()))
    report = replace(golden("bz2-shards"), stack_classes=classes)
    # WHEN rendered
    text = Elements(report_html(report)).all_text
    # THEN the tree is STAT's: the ranks at each branch, where rank 2 stops, and rank 3 without a stack
    assert "ranks 0-2main train.py:1step train.py:5" in text
    assert "ranks 0-1all_reduce c10d.py:10" in text
    assert "rank 2 (innermost frame above)" in text and "rank 3 (no stack)" in text
    # AND a class without frames is listed even when it is the only one
    assert "ranks 0-1 (no stack)" in Elements(page("healthy-finished")).all_text


def test_the_page_prints_with_every_worker_shown():
    # GIVEN the page's print style THEN the folded workers open on paper, and nothing is cut across pages
    text = page("bz2-shards")
    printed = text[text.index("@media print"):]
    assert "details::details-content{content-visibility:visible" in printed
    assert ".rank-block,.finding,tr{break-inside:avoid}" in printed


def test_job_strings_are_escaped_and_secrets_redacted():
    # GIVEN a report whose frames, details and evidence hold markup, control characters and a token
    hostile = "<script>alert(1)</script>\"'&\x1b[2J"
    token = "hf_abcdEFGHijklMNOPqrst1234"
    report = golden("bz2-shards")
    lane = replace(report.lanes[0], spans=(Span("collective-wait", 0.0, 4.0, hostile),),
                   workers=(Lane(0, 1, (Span("idle", 0.0, 4.0, hostile),), worker=0),))
    evil = Finding("collective-straggler", Severity.CRITICAL, (1,), f"title {hostile}",
                   (f"evidence {hostile} HF_TOKEN={token}",), f"fix {hostile}")
    report = replace(report, lanes=(lane,), findings=(evil,), host=hostile,
                     ranks=(replace(report.ranks[0], top_frame=hostile),))
    # WHEN rendered as HTML
    text = report_html(report)
    # THEN no markup of the job's reaches the page, nor the token, nor an escape sequence
    assert "<script>" not in text and "\x1b" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert token not in text
    assert not Elements(text).unbalanced


def test_a_merged_job_of_many_nodes_draws_a_lane_per_class(tmp_path):
    # GIVEN 12 nodes of 8 ranks (96 > the 64 read whole), rank 77 starved of data, the others in all_reduce
    for n in range(12):
        save_node(node_bundle(n, 12, 77, 1.7e9, workers=1), tmp_path / f"node{n:02d}.json.zst")
    # WHEN `hangdoc report DIR` folds them by class and renders HTML
    _, report = report_from_files([tmp_path])
    report = report.report
    doc = Elements(report_html(report))
    # THEN there is a lane per class of ranks, not per rank; the culprit has its own
    lanes = rank_lanes(doc)
    assert len(lanes) == len(report.ranks) < 8
    assert report.ranks_seen == 96
    assert [a["data-rank"] for a in lanes if a["data-culprit"] == "true"] == ["77"]
    big = next(lane for lane in report.lanes if lane.rank_count > 1)
    assert f"ranks {big.rank_set}" in doc.all_text and f"{big.rank_count:,} ranks" in doc.all_text
    # AND the GPU each rank's NVML reading gave is drawn as a line
    assert big.gpu_util_pct and big.gpu_power_w
    assert {a["data-series"] for a in doc.with_class("series")} >= {"GPU", "power"}


def test_no_lanes_no_timeline():
    # GIVEN a verdict reached before any rank was seen WHEN rendered THEN the page has no timeline but the verdict
    from hangdoc.report import report_without_ranks
    from hangdoc.model import Verdict

    text = report_html(report_without_ranks(Verdict.HANG, ()))
    assert "id=\"timeline\"" not in text and "HANG" in text
    assert not Elements(text).unbalanced


def test_the_trace_and_the_page_agree_on_the_lanes():
    # GIVEN a crash golden WHEN rendered both ways THEN the trace has a process per lane the page draws
    from hangdoc.render.trace import report_trace

    report = golden("worker-keyerror")
    events = json.loads(report_trace(report))["traceEvents"]
    names = [e["args"]["name"] for e in events if e["name"] == "process_name"]
    assert len(names) == len(rank_lanes(Elements(page("worker-keyerror"))))


def test_report_writes_the_page_and_the_trace(tmp_path):
    # GIVEN a saved bundle of a hang WHEN `hangdoc report BUNDLE --format html -o FILE` and `--format trace`
    import subprocess
    import sys

    bundle = GOLDEN / "bz2-shards" / "bundle.json"
    out = tmp_path / "hang.html"
    done = subprocess.run([sys.executable, "-m", "hangdoc", "report", str(bundle), "--format", "html", "-o", str(out)],
                          capture_output=True, text=True, timeout=60)
    traced = subprocess.run([sys.executable, "-m", "hangdoc", "report", str(bundle), "-f", "trace"],
                            capture_output=True, text=True, timeout=60)
    # THEN the page is in the file, the trace on stdout, and both exit as the hang does
    assert (done.returncode, traced.returncode) == (3, 3), done.stderr + traced.stderr
    assert not done.stdout and f"hangdoc: {headline(golden('bz2-shards'))}" in Elements(out.read_text()).all_text
    assert json.loads(traced.stdout)["otherData"]["culprit_ranks"] == [1]


def test_html_flag_checks_its_file_first_and_says_where_it_wrote(tmp_path, capsys):
    # GIVEN `watch` / `run` --html: a directory is refused before the watch, a file is written and named
    from hangdoc.base.errors import BadOutput
    from hangdoc.cli.common import html_target, write_html

    with pytest.raises(BadOutput, match="--html"):
        html_target(tmp_path)
    write_html(golden("bz2-shards"), html_target(tmp_path / "hang.html"))
    assert "HTML report written to" in capsys.readouterr().err
    assert "CULPRIT" in (tmp_path / "hang.html").read_text()
    # AND a page that cannot be written is one line, not a traceback
    write_html(golden("bz2-shards"), tmp_path / "gone" / "hang.html")
    assert "the HTML report was not written" in capsys.readouterr().err
