"""`--format trace`: the report's lanes as Chrome trace-event JSON (Perfetto, chrome://tracing),
checked for its mapping on every golden bundle, and event for event on two of them.

The events are a pure function of the report's lanes and verdict, so a golden trace changes only
when the lanes do. Re-record the two after a deliberate change:
    HANGDOC_RECORD_TRACE=1 .venv/bin/python -m pytest -q tests/unit/test_trace_report.py
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

import pytest

from hangdoc.bundle.files import load_bundle
from hangdoc.render.trace import report_trace, us, worker_lanes
from hangdoc.render.words import headline
from hangdoc.report import judge

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "bundle.json").is_file())
EXACT = ("bz2-shards", "worker-keyerror")    # a hang with its workers, a crash whose ranks flicker and step


@lru_cache(maxsize=None)
def traced(name: str):
    report = judge(load_bundle(GOLDEN / name / "bundle.json")).report
    return report, json.loads(report_trace(report))


def of(events, ph: str, pid: int | None = None) -> list[dict]:
    return [e for e in events if e["ph"] == ph and (pid is None or e["pid"] == pid)]


@pytest.mark.parametrize("name", CASES)
def test_a_process_per_rank_with_its_states_steps_and_counters(name):
    # GIVEN a golden bundle WHEN its report is written as a trace
    report, doc = traced(name)
    events = doc["traceEvents"]
    # THEN each lane is a process, named for its rank, the culprits saying so
    names = {e["pid"]: e["args"]["name"] for e in of(events, "M") if e["name"] == "process_name"}
    assert len(names) == len(report.lanes)
    for pid, lane in enumerate(report.lanes, start=1):
        assert names[pid].startswith(f"rank {lane.rank}")
        assert ("(culprit)" in names[pid]) == lane.culprit
        # AND each span is a complete slice on the main thread or its worker's thread, in microseconds
        slices = of(events, "X", pid)
        assert [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in slices] == [
            (s.state, us(s.start_s), us(s.end_s)) for each in (lane, *worker_lanes(lane)) for s in each.spans]
        assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)
        threads = {e["tid"] for e in of(events, "M", pid) if e["name"] == "thread_name"}
        assert {e["tid"] for e in slices} <= threads and len(threads) == 1 + len(worker_lanes(lane))
        # AND each step an instant, each CPU or GPU reading a counter
        assert [e["ts"] for e in of(events, "i", pid) if e["name"] == "step"] == [us(t) for t in lane.steps]
        counters = of(events, "C", pid)
        assert len(counters) == (len(lane.cpu_pct) + len(lane.gpu_util_pct) + len(lane.gpu_power_w)
                                 + sum(len(w.cpu_pct) for w in worker_lanes(lane)))
    # AND the verdict is a global instant, the report's headline beside the events
    verdicts = [e for e in of(events, "i") if e["s"] == "g" and e["name"].startswith("verdict")]
    assert len(verdicts) == 1 and verdicts[0]["args"]["culprit_ranks"] == list(report.culprit_ranks)
    assert doc["otherData"]["headline"] == headline(report)
    assert doc["displayTimeUnit"] == "ms"


@pytest.mark.parametrize("name", EXACT)
def test_the_trace_is_the_golden_one(name):
    # GIVEN a golden bundle WHEN written as a trace THEN its events are expected.trace.json's, one for one
    _, doc = traced(name)
    path = GOLDEN / name / "expected.trace.json"
    if os.environ.get("HANGDOC_RECORD_TRACE"):
        path.write_text("[\n" + ",\n".join(json.dumps(e) for e in doc["traceEvents"]) + "\n]\n")
    assert doc["traceEvents"] == json.loads(path.read_text())


def test_the_onset_of_a_hang_is_marked():
    # GIVEN a hang detected 4.4 s after the stall began WHEN traced
    report, doc = traced("bz2-shards")
    marks = {e["name"]: e["ts"] for e in of(doc["traceEvents"], "i") if e["s"] == "g"}
    # THEN the stall's onset and the verdict are global instants that far apart (the onset no earlier than 0)
    assert marks["verdict: hang"] - marks["stall began"] == pytest.approx(
        min(us(report.detected_after_s), marks["verdict: hang"]), abs=1000)


@pytest.mark.parametrize("name", CASES)
def test_every_event_is_one_chrome_trace_viewers_read(name):
    # GIVEN a golden bundle WHEN written as a trace
    _, doc = traced(name)
    events = doc["traceEvents"]
    # THEN every event has the fields a strict reader asks for, of the kinds Perfetto and chrome://tracing draw
    for e in events:
        assert {"name", "ph", "ts", "pid", "tid"} <= set(e), e
        assert e["ph"] in ("M", "X", "i", "C") and isinstance(e["ts"], int) and e["ts"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    for e in of(events, "X"):
        assert isinstance(e["dur"], int) and e["dur"] >= 0 and e["cat"] in ("rank", "worker")
    assert all(e["s"] in ("g", "p", "t") for e in of(events, "i"))
    assert all(e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()) for e in of(events, "C"))
    # AND metadata names every process and thread an event is drawn on
    meta = of(events, "M")
    assert {m["name"] for m in meta} <= {"process_name", "process_sort_index", "process_labels", "thread_name",
                                         "thread_sort_index"}
    processes = {m["pid"] for m in meta if m["name"] == "process_name"}
    threads = {(m["pid"], m["tid"]) for m in meta if m["name"] == "thread_name"}
    drawn = [e for e in events if e["ph"] != "M" and e.get("s") != "g"]
    assert {e["pid"] for e in drawn} <= processes
    assert {(e["pid"], e["tid"]) for e in drawn} <= threads


def test_a_stall_older_than_the_watch_is_marked_at_its_left_edge():
    # GIVEN a hang whose ranks had stalled before hangdoc's first sample (fr-straggler: 6.4 s of stall in 4.5 s watched)
    report, doc = traced("fr-straggler")
    marks = {e["name"]: e for e in of(doc["traceEvents"], "i") if e["s"] == "g"}
    # THEN the onset is at 0 and says it began earlier, how much earlier in its args
    onset = marks["stall began (before the first sample)"]
    assert onset["ts"] == 0 and onset["args"]["detected_after_s"] == report.detected_after_s
    assert us(report.detected_after_s) > marks["verdict: hang"]["ts"]


def test_job_strings_in_the_trace_are_redacted():
    from dataclasses import replace

    from hangdoc.model import Span

    token = "hf_abcdEFGHijklMNOPqrst1234"
    report, _ = traced("bz2-shards")
    lane = replace(report.lanes[0], spans=(Span("idle", 0.0, 1.0, f"HF_TOKEN={token}"),))
    text = report_trace(replace(report, lanes=(lane,)))
    assert token not in text and json.loads(text)
