"""The report's timeline as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
chrome://tracing open beside a PyTorch profiler trace.

A process per lane (a rank, or a class of ranks), its main thread and one thread per DataLoader
worker; the states as complete slices ("X"), the steps as instants ("i"), the main thread's CPU
and the GPU as counters ("C"); the onset and the verdict as global instants. Times are
microseconds from hangdoc's first sample. docs/report-schema.md, "Trace mapping", lists it all.
"""
from __future__ import annotations

import json
from typing import TextIO

from hangdoc.base.words import rank_label
from hangdoc.model import Lane, REPORT_SCHEMA, Report, Verdict
from hangdoc.render.escape import redact_tree
from hangdoc.render.words import headline

MAIN_TID = 1


def us(seconds: float) -> int:
    return int(round(seconds * 1_000_000))


def trace_events(report: Report) -> list[dict]:
    events: list[dict] = []
    for index, lane in enumerate(report.lanes):
        events += _lane_events(lane, index + 1, index)
    end = max((s.end_s for lane in report.lanes for each in (lane, *lane.workers, *lane.retired) for s in each.spans[-1:]),
              default=0.0)
    first_pid = 1 if report.lanes else 0
    if report.detected_after_s is not None:
        what = "first rank exited" if report.verdict == Verdict.CRASH else "stall began"
        onset = end - report.detected_after_s
        if onset < -0.1:      # detected_after_s is rounded to 0.1 s; past that, it began before hangdoc looked
            what += " (before the first sample)"
        events.append({"name": what, "ph": "i", "s": "g", "ts": us(max(0.0, onset)),
                       "pid": first_pid, "tid": MAIN_TID, "args": {"detected_after_s": report.detected_after_s}})
    events.append({"name": f"verdict: {report.verdict}", "ph": "i", "s": "g", "ts": us(end), "pid": first_pid,
                   "tid": MAIN_TID, "args": {"culprit_ranks": list(report.culprit_ranks)}})
    return events


def _lane_events(lane: Lane, pid: int, order: int) -> list[dict]:
    who = f"ranks {lane.rank_set} ({lane.rank_count} ranks)" if lane.rank_set else f"rank {rank_label(lane.rank)}"
    events: list[dict] = [
        _meta("process_name", pid, 0, name=f"{who}{' (culprit)' if lane.culprit else ''}, pid {lane.pid}"),
        _meta("process_sort_index", pid, 0, sort_index=order),
        _meta("thread_name", pid, MAIN_TID, name="main thread"),
        _meta("thread_sort_index", pid, MAIN_TID, sort_index=0),
    ]
    if lane.culprit:
        events.append(_meta("process_labels", pid, 0, labels="culprit"))
    events += _slices(lane, pid, MAIN_TID, "rank")
    events += [{"name": "step", "cat": "step", "ph": "i", "s": "t", "ts": us(t), "pid": pid, "tid": MAIN_TID}
               for t in lane.steps]
    events += _counter("main thread CPU %", "cpu", lane.cpu_pct, pid)
    events += _counter("GPU utilization %", "util", lane.gpu_util_pct, pid)
    events += _counter("GPU power W", "power", lane.gpu_power_w, pid)
    for n, worker in enumerate(worker_lanes(lane)):
        tid = MAIN_TID + 1 + n
        index = worker.worker if worker.worker is not None else "?"
        retired = " (retired)" if worker in lane.retired else ""
        events += [_meta("thread_name", pid, tid, name=f"DataLoader worker {index}{retired}, pid {worker.pid}"),
                   _meta("thread_sort_index", pid, tid, sort_index=1 + n)]
        events += _slices(worker, pid, tid, "worker")
        events += _counter(f"worker {index} (pid {worker.pid}) CPU %", "cpu", worker.cpu_pct, pid)
    return events


def worker_lanes(lane: Lane) -> list[Lane]:
    """The rank's workers, live, dead and retired alike, in the order they were first seen."""
    return sorted((*lane.workers, *lane.retired), key=lambda w: (w.spans[0].start_s if w.spans else 0.0, w.worker or 0))


def _meta(kind: str, pid: int, tid: int, **args) -> dict:
    # ts and tid on every event, though metadata and counters need neither: stricter readers ask for them.
    return {"name": kind, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}


def _slices(lane: Lane, pid: int, tid: int, cat: str) -> list[dict]:
    out = []
    for span in lane.spans:
        event = {"name": span.state, "cat": cat, "ph": "X", "ts": us(span.start_s),
                 "dur": us(span.end_s) - us(span.start_s), "pid": pid, "tid": tid}
        if span.detail:
            event["args"] = {"detail": span.detail}
        out.append(event)
    return out


def _counter(name: str, key: str, series: tuple[tuple[float, float], ...], pid: int) -> list[dict]:
    return [{"name": name, "ph": "C", "ts": us(t), "pid": pid, "tid": MAIN_TID, "args": {key: v}} for t, v in series]


def report_trace(report: Report) -> str:
    """The trace document: its events one a line (readable, and diffable), then what it is of."""
    other = redact_tree({"schema": REPORT_SCHEMA, "verdict": str(report.verdict), "headline": headline(report),
                         "culprit_ranks": list(report.culprit_ranks),
                         "findings": [f"{f.severity.value} {f.rule}: {f.title}" for f in report.findings]})
    lines = ",\n".join(json.dumps(e, separators=(",", ":")) for e in redact_tree(trace_events(report)))
    return ("{\"traceEvents\":[\n" + lines + "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":"
            + json.dumps(other, separators=(",", ":")) + "}\n")


def render_trace(report: Report, out: TextIO) -> None:
    out.write(report_trace(report))
