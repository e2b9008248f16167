"""Each rank over the watched time, for the formats that draw it (HTML, trace): its states as
spans, its steps, its main thread's CPU and its GPU, and its DataLoader workers' lanes under it.

Read once from the timelines the analysis built, so no renderer reads the bundle. Bounded
whatever the watch's length: equal states merge into spans, and spans, steps, series, lanes
and workers are capped (a merged job of thousands of nodes has a lane per class of ranks).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hangdoc.analyze.diagnose import Diagnosis, RankView
from hangdoc.analyze.workers import Fate, workers_of_rank
from hangdoc.analyze.progress import step_times
from hangdoc.analyze.restarts import restarts_of
from hangdoc.analyze.timeline import Point, Timeline, timelines
from hangdoc.model import Bundle, Lane, RankState, RestartMark, Span, WorkerState

MAX_LANES = 64          # as the ranks table: past it, the culprits and the first others
MAX_WORKERS = 16        # per rank, live and dead, and again retired: the latest to start (a new epoch forks new ones)
MAX_SPANS = 200         # per lane: past it, the lane is read in MAX_SPANS equal slots
MAX_POINTS = 300        # per series, and step ticks per lane
MAX_DETAILS = 3         # functions named in a span's detail
# States a span keeps while it waits in one thing (its detail); others last while the state does.
_WAITS = frozenset({RankState.COLLECTIVE, RankState.DATALOADER, RankState.IDLE, WorkerState.LOCK_WAIT,
                    WorkerState.QUEUE_PUT, WorkerState.IDLE, WorkerState.BLOCKED})


def lanes(bundle: Bundle, diagnosis: Diagnosis, lines: dict[int, Timeline] | None = None) -> tuple[Lane, ...]:
    """A lane per rank view (per class, when the views stand for classes), in the report's order."""
    if not bundle.samples:
        return ()
    lines = timelines(bundle) if lines is None else lines
    first = bundle.samples[0].time
    culprits = {id(v) for v in diagnosis.culprit_views}
    views = [(v, id(v) in culprits) for v in diagnosis.ranks if v.info.pid in lines]
    if len(views) > MAX_LANES:
        room = MAX_LANES - sum(culprit for _, culprit in views)
        kept = []
        for view, culprit in views:
            if culprit or room > 0:
                kept.append((view, culprit))
                room -= not culprit
        views = kept
    newest = tuple(_rank_lane(bundle, v, lines, first, culprit) for v, culprit in views)
    return _with_generations(bundle, newest, lines, first)


def _with_generations(bundle: Bundle, newest: tuple[Lane, ...], lines: dict[int, Timeline],
                      first: float) -> tuple[Lane, ...]:
    """A restarted job's lanes: the newest start's, then each earlier start's ranks, apart."""
    current = {id(p) for p in bundle.job.ranks}     # by identity: comparing records was quadratic in ranks
    earlier = [p for p in bundle.job.all_ranks if id(p) not in current and p.pid in lines]
    restarted = any(p.generation for p in bundle.job.ranks) or earlier
    if not restarted:
        return newest
    now = max(p.generation for p in bundle.job.ranks)
    older = tuple(Lane(rank=p.rank, pid=p.node_pid, spans=spans(lines[p.pid].points, first),
                       steps=_capped(tuple(_at(t, first) for t in step_times(lines[p.pid]))),
                       cpu_pct=_downsampled(_cpu(lines[p.pid].points, first, main=True)), generation=p.generation)
                  for p in sorted(earlier, key=lambda p: (-p.generation, p.rank if p.rank is not None else -1)))
    return tuple(dataclasses.replace(lane, generation=now) for lane in newest) + older[:MAX_LANES]


def restart_marks(bundle: Bundle) -> tuple[RestartMark, ...]:
    """Each restart of the ranks the watch saw begin, with the failure before it."""
    restarts = restarts_of(bundle)
    if restarts is None or not bundle.samples:
        return ()
    first = bundle.samples[0].time
    failed = {f.generation: f for f in restarts.failures}
    marks = []
    for generation, start in enumerate(restarts.started, start=1):
        cause = failed.get(generation - 1)
        marks.append(RestartMark(max(0.0, _at(start, first)), generation, cause.rank if cause else None,
                                 cause.how if cause else None))
    return tuple(marks)


def _rank_lane(bundle: Bundle, view: RankView, lines: dict[int, Timeline], first: float, culprit: bool) -> Lane:
    line = lines[view.info.pid]
    fates = workers_of_rank(bundle, view.info.pid, lines).workers
    newest = max((f.generation for f in fates), default=0)

    def latest(chosen) -> list:
        return sorted(chosen, key=lambda f: (lines[f.pid].points[0].time, f.info.worker_index or 0))[-MAX_WORKERS:]

    def worker_lane(w) -> Lane:
        return Lane(rank=view.info.rank, pid=w.info.node_pid, spans=spans(lines[w.pid].points, first),
                    cpu_pct=_downsampled(_cpu(lines[w.pid].points, first, main=False)), worker=w.info.worker_index)

    retired = [f for f in fates if f.fate is Fate.RETIRED]
    util, power = _gpu(bundle, view.info.pid, first)
    return Lane(
        rank=view.info.rank, pid=view.info.node_pid, spans=spans(line.points, first),
        steps=_capped(tuple(_at(t, first) for t in step_times(line))),
        cpu_pct=_downsampled(_cpu(line.points, first, main=True)),
        gpu_util_pct=_downsampled(util), gpu_power_w=_downsampled(power),
        culprit=culprit,
        rank_set=view.rank_set,
        rank_count=view.count,
        workers=tuple(worker_lane(w) for w in latest(f for f in fates if f.fate is not Fate.RETIRED)),
        retired=tuple(worker_lane(w) for w in latest(retired)),
        retired_count=len(retired),
        retired_earlier=all(f.generation < newest for f in retired),
    )


def _at(time: float, first: float) -> float:
    return round(time - first, 3)


def spans(points: Sequence[Point], first: float, limit: int = MAX_SPANS) -> tuple[Span, ...]:
    """The points' states as spans, each from its first point to the next span's (the last ends at
    the last point). A wait is one span while it waits in one thing; any other state while it
    lasts, its detail the functions it ran (the first few)."""
    runs: list[tuple[tuple, float, list[str]]] = []      # (key, start, details)
    for point in points:
        reading = point.reading
        key = (reading.state, reading.detail if reading.state in _WAITS else None)
        shown = reading.detail or (reading.frame.label if reading.frame else None)
        if not runs or runs[-1][0] != key:
            runs.append((key, point.time, []))
        details = runs[-1][2]
        if shown is not None and str(shown) not in details and len(details) <= MAX_DETAILS:
            details.append(str(shown))
    if not runs:
        return ()
    ends = [start for _, start, _ in runs[1:]] + [points[-1].time]
    out = tuple(Span(str(key[0]), _at(start, first), _at(end, first), _details(details) or None)
                for (key, start, details), end in zip(runs, ends))
    return _coarsened(out, limit) if len(out) > limit else out


def _details(details: list[str]) -> str:
    return ", ".join(details[:MAX_DETAILS]) + (", ..." if len(details) > MAX_DETAILS else "")


def _coarsened(spans: tuple[Span, ...], limit: int) -> tuple[Span, ...]:
    """`limit` equal slots over the spans, each taking the state that held longest in it; equal
    neighbours merged again. A lane that flickers every sample still draws in bounded size."""
    start, end = spans[0].start_s, spans[-1].end_s
    width = (end - start) / limit
    out: list[Span] = []
    i = 0
    for slot in range(limit):
        lo, hi = start + slot * width, start + (slot + 1) * width
        held: dict[tuple, float] = {}
        while i < len(spans) and spans[i].end_s <= lo:
            i += 1
        j = i
        while j < len(spans) and spans[j].start_s < hi:
            s = spans[j]
            key = (s.state, s.detail)
            held[key] = held.get(key, 0.0) + min(s.end_s, hi) - max(s.start_s, lo)
            j += 1
        if not held:
            continue
        state, detail = max(held, key=held.get)
        if out and (out[-1].state, out[-1].detail) == (state, detail):
            out[-1] = Span(state, out[-1].start_s, round(hi, 3), detail)
        else:
            out.append(Span(state, round(lo, 3), round(hi, 3), detail))
    return tuple(out)


def _cpu(points: Sequence[Point], first: float, main: bool) -> tuple[tuple[float, float], ...]:
    """% of a core between consecutive points: the main thread's (`main`) or the whole process's."""
    out = []
    for a, b in zip(points, points[1:]):
        dt = b.time - a.time
        ca = (a.main.cpu_s if a.main else None) if main else a.cpu_s
        cb = (b.main.cpu_s if b.main else None) if main else b.cpu_s
        if dt > 0 and ca is not None and cb is not None:
            out.append((_at(b.time, first), round(max(0.0, cb - ca) / dt * 100, 1)))
    return tuple(out)


def _gpu(bundle: Bundle, pid: int, first: float) -> tuple[tuple, tuple]:
    """The rank's GPU at each sample that read it: (utilisation %, power W) series."""
    util, power = [], []
    for snapshot in bundle.samples:
        device = snapshot.gpu.device_of(pid) if snapshot.gpu.available else None
        if device is None:
            continue
        if device.utilization_pct is not None:
            util.append((_at(snapshot.time, first), float(device.utilization_pct)))
        if device.power_w is not None:
            power.append((_at(snapshot.time, first), round(device.power_w, 1)))
    return tuple(util), tuple(power)


def _downsampled(series: tuple[tuple[float, float], ...], limit: int = MAX_POINTS) -> tuple[tuple[float, float], ...]:
    """At most `limit` points: consecutive points averaged in equal groups."""
    if len(series) <= limit:
        return series
    size = -(-len(series) // limit)
    out = []
    for i in range(0, len(series), size):
        times, values = zip(*series[i:i + size])
        out.append((round(sum(times) / len(times), 3), round(sum(values) / len(values), 1)))
    return tuple(out)


def _capped(times: tuple[float, ...], limit: int = MAX_POINTS) -> tuple[float, ...]:
    """At most `limit` step ticks, evenly chosen (a job that steps every sample draws a comb anyway)."""
    if len(times) <= limit:
        return times
    return tuple(times[i * len(times) // limit] for i in range(limit))
