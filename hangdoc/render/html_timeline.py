"""The HTML page's timeline: every rank's lane of states over the watch, its DataLoader workers
folded under it, the steps its loop took and its CPU, GPU and power series, as inline SVG.

Colours are the Okabe-Ito palette, and every state also has its name on the lane (where it
fits), in the legend and in the span's tooltip; waits are hatched, so the picture reads without
colour too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from hangdoc.base.words import cut, plural, rank_label
from hangdoc.model import Lane, Report, Span, Verdict
from hangdoc.render.escape import html_text as h
from hangdoc.render.template import fill, template_text
from hangdoc.render.words import span as long_span, verdict_word

# The lanes' SVG coordinates: the plot, then a gutter on its right for the series' last values.
PLOT_W = 900
VIEW_W = 1000
STEP_H = 6
BAR_H = 20
SERIES_H = 16
CHAR_W = 6.4            # an 11-unit sans-serif character, for fitting a label into its span
MIN_SPAN_W = 3          # narrower than this, the last span (a state read at the verdict) goes right of the line
GUTTER_PAD = 4
AT_VERDICT_W = 12
_RESTART_LOOK = 'stroke="#0072B2" stroke-width="2" stroke-dasharray="1 3"'   # a restart's dotted line

# state -> (fill, text colour, pattern): Okabe-Ito; "hatch" marks a wait, "dots" idle, "cross" gone.
STATE_LOOK: dict[str, tuple[str, str, str]] = {
    "collective-wait": ("#E69F00", "#000", "hatch"),
    "dataloader-wait": ("#56B4E9", "#000", "hatch"),
    "compute": ("#009E73", "#000", "solid"),
    "io": ("#0072B2", "#fff", "solid"),
    "idle": ("#DDDDDD", "#000", "dots"),
    "exited": ("#444444", "#fff", "cross"),
    "unknown": ("#F2F2F2", "#000", "solid"),
    "decompressing": ("#CC79A7", "#000", "solid"),
    "decoding": ("#D55E00", "#000", "solid"),
    "reading": ("#0072B2", "#fff", "solid"),
    "busy": ("#009E73", "#000", "solid"),
    "lock-wait": ("#F0E442", "#000", "hatch"),
    "queue-put": ("#56B4E9", "#000", "hatch"),
    "blocked": ("#D55E00", "#000", "hatch"),
}
STATE_WORDS = {
    "collective-wait": "waits in a collective", "dataloader-wait": "waits for its DataLoader",
    "compute": "runs code", "io": "file I/O", "idle": "asleep", "exited": "gone", "unknown": "not read",
    "decompressing": "worker decompresses", "decoding": "worker decodes", "reading": "worker reads",
    "busy": "worker runs dataset code", "lock-wait": "worker waits on a lock", "queue-put": "worker waits to hand over",
    "blocked": "worker blocked in a system call (an open, a read)",
}


@dataclass(frozen=True)
class Scale:
    """Seconds from the first sample to SVG units; the watch's end is where the verdict was read
    (a report of one sample is all at that line)."""

    end_s: float
    onset_s: float | None = None
    restarts_s: tuple[float, ...] = ()     # when the launcher started the ranks again

    def x(self, t: float) -> float:
        if self.end_s <= 0:
            return float(PLOT_W)
        return round(max(0.0, min(t, self.end_s)) / self.end_s * PLOT_W, 1)

    def at_verdict(self, lane: Lane) -> bool:
        """Whether the lane's last state was first read at the last sample (too narrow to draw on the plot)."""
        if not lane.spans:
            return False
        x0, x1 = self.x(lane.spans[-1].start_s), self.x(lane.spans[-1].end_s)
        return x1 >= PLOT_W and x1 - x0 < MIN_SPAN_W


def watch_end(lanes: tuple[Lane, ...]) -> float:
    """Seconds from the first sample to the last any lane was read at."""
    ends = [s.end_s for lane in lanes for each in (lane, *lane.workers, *lane.retired) for s in each.spans[-1:]]
    return max(ends, default=0.0)


def timeline_html(report: Report) -> str:
    """The page's Timeline section ("" when the report has no lanes)."""
    if not report.lanes:
        return ""
    end = watch_end(report.lanes)
    onset = None
    if report.detected_after_s is not None:
        onset = end - report.detected_after_s
        onset = max(0.0, onset) if onset > -0.1 else onset    # detected_after_s is rounded to 0.1 s
    scale = Scale(end, onset, tuple(mark.at_s for mark in report.restarts))
    states = {s.state for lane in report.lanes for each in (lane, *lane.workers, *lane.retired) for s in each.spans}
    watched = (f"over the {end:.1f} s hangdoc watched (0 s: its first sample)" if end > 0
               else "at the one sample hangdoc read")
    gone = any(scale.at_verdict(each) for lane in report.lanes for each in (lane, *lane.workers, *lane.retired))
    out = ["<section id=\"timeline\">", "<h2>Timeline</h2>",
           f"<p class=\"caption\">Each rank's main thread {watched}, its DataLoader workers folded under it. "
           "Ticks above a lane: the rank's loop stepped."
           + (" A state first read at the last sample (a rank seen gone) is right of the verdict line." if gone else "")
           + _onset_words(report, onset) + _restart_words(report) + "</p>",
           _legend(states, onset is not None and onset >= 0), "<div class=\"lanes\">", _axis(scale, report)]
    newest = max((lane.generation for lane in report.lanes if lane.generation is not None), default=None)
    for lane in report.lanes:
        if lane.generation == newest:
            out.append(_rank_block(lane, scale))
    for generation in sorted({lane.generation for lane in report.lanes if lane.generation != newest}, reverse=True):
        name = "the first start" if generation == 0 else f"restart {generation}"
        out.append(f"<p class=\"generation\">Earlier: the ranks of {h(name)}, which the launcher replaced</p>")
        out += [_rank_block(lane, scale, earlier=True) for lane in report.lanes if lane.generation == generation]
    out.append("</div>")
    shown = sum(lane.rank_count for lane in report.lanes)
    if shown < report.ranks_seen:
        out.append(f"<p class=\"more\">{report.ranks_seen - shown:,} more ranks are in the table below, "
                   "not drawn here.</p>")
    out.append("</section>")
    return "\n".join(out) + "\n"


def _onset_words(report: Report, onset: float | None) -> str:
    if onset is None:
        return " The verdict was read at the last sample."
    if onset < 0:
        return (f" The stall began {_seconds(-onset)} before the first sample (at the left edge); the verdict was "
                "read at the last sample.")
    what = "the first rank exited" if report.verdict == Verdict.CRASH else "the stall began"
    return f" Dashed line: {what} ({onset:.1f} s); solid line: the verdict, at the last sample."


def _restart_words(report: Report) -> str:
    if not report.restarts:
        return ""
    said = []
    for mark in report.restarts:
        why = f" after rank {rank_label(mark.failed_rank)} {mark.how}" if mark.how else ""
        said.append(f"restart {mark.generation} at {mark.at_s:.1f} s{why}")
    return (" Dotted lines: the launcher started the ranks again (" + "; ".join(said) + "); the newest start's "
            "ranks come first, the earlier starts' below them.")


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else long_span(value)


def _legend(states: set[str], onset: bool) -> str:
    items = []
    for state in sorted(states, key=lambda s: list(STATE_LOOK).index(s) if s in STATE_LOOK else 99):
        items.append(f"<li>{fill('swatch-state.svg', paint=_fill(state))}"
                     f"<b>{h(state)}</b> {h(STATE_WORDS.get(state, ''))}</li>")
    items.append(f"<li>{template_text('swatch-step.svg')}step</li>")
    if onset:
        items.append(f"<li>{template_text('swatch-onset.svg')}onset</li>")
    items.append(f"<li>{template_text('swatch-verdict.svg')}verdict</li>")
    return "<ul class=\"legend\">" + "".join(items) + "</ul>"


def _tick_step(span: float) -> float:
    """Seconds between two ticks of a `span`-second axis: ten ticks at most, whatever the span
    (a bundle's times may lie 2x10^11 s apart: a fixed step drew 28 million ticks, 1.1 GB)."""
    step = next((s for s in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
                 if span / s <= 10), None)
    if step is not None:
        return step
    power = 10.0 ** math.floor(math.log10(span / 10))
    return next(m * power for m in (1, 2, 5, 10) if span / (m * power) <= 10)


def _axis(scale: Scale, report: Report) -> str:
    step = _tick_step(scale.end_s)
    ticks = []
    t = 0.0
    while 0 < scale.end_s and t <= scale.end_s + 1e-9:      # one sample: no time to mark
        x = scale.x(t)
        anchor = "start" if t == 0 else "end" if x > PLOT_W - 20 else "middle"   # the verdict's word is right of it
        at = round(x - 3, 1) if anchor == "end" else x
        ticks.append(f"<path d=\"M{x} 16v6\"/><text x=\"{at}\" y=\"12\" text-anchor=\"{anchor}\">{t:g} s</text>")
        t += step
    marks = []
    if scale.onset_s is not None and scale.onset_s >= 0:
        marks.append(f"<path class=\"onset\" d=\"M{scale.x(scale.onset_s)} 0v24\"/>")
    for number, at in enumerate(scale.restarts_s, start=1):
        marks.append(f"<path class=\"restart\" {_RESTART_LOOK} d=\"M{scale.x(at)} 0v24\"><title>restart {number}</title></path>")
    marks.append(f"<path class=\"verdict-mark\" d=\"M{PLOT_W} 0v24\"/><text x=\"{PLOT_W + 4}\" y=\"12\" "
                 f"class=\"verdict-word\">{h(verdict_word(report))}</text>")
    return (f"<div class=\"lane axis\"><div class=\"label\">time</div><svg viewBox=\"0 0 {VIEW_W} 24\" "
            "role=\"img\" aria-label=\"time axis\">" + "".join(ticks) + "".join(marks) + "</svg></div>")


def _rank_block(lane: Lane, scale: Scale, earlier: bool = False) -> str:
    culprit = " culprit" if lane.culprit else ""
    out = [f"<div class=\"rank-block{culprit}\">", _lane_row(lane, scale, worker=False, earlier=earlier)]
    if lane.workers:
        count = len(lane.workers)
        out.append(f"<details class=\"workers\"{' open' if lane.culprit else ''}><summary>{count} DataLoader "
                   f"worker{'s' if count != 1 else ''} of rank {h(rank_label(lane.rank))}</summary>")
        out += [_lane_row(w, scale, worker=True) for w in lane.workers]
        out.append("</details>")
    if lane.retired_count:
        # Workers of ended epochs matter less than the ones a rank has now: one folded row, closed.
        rank = h(rank_label(lane.rank))
        whose = f"of rank {rank}'s earlier epochs" if lane.retired_earlier else f"of rank {rank}, ended with their loader or rank"
        drawn = "" if len(lane.retired) == lane.retired_count else f" (the latest {len(lane.retired)} drawn)"
        out.append(f"<details class=\"workers retired\"><summary>{plural(lane.retired_count, 'retired worker')} "
                   f"{whose}{drawn}</summary>")
        out += [_lane_row(w, scale, worker=True) for w in lane.retired]
        out.append("</details>")
    out.append("</div>")
    return "\n".join(out)


def _lane_row(lane: Lane, scale: Scale, worker: bool, earlier: bool = False) -> str:
    if worker:
        index = lane.worker if lane.worker is not None else "?"
        name = f"worker {index}"
        attrs = f"class=\"lane worker\" data-rank=\"{h(rank_label(lane.rank))}\" data-worker=\"{h(index)}\""
        sub = f"pid {lane.pid}"
    else:
        name = f"ranks {lane.rank_set}" if lane.rank_set else f"rank {rank_label(lane.rank)}"
        start = f"-start{lane.generation}" if lane.generation is not None else ""
        name += f" · start {lane.generation}" if lane.generation else ""
        attrs = (f"class=\"lane rank{' culprit' if lane.culprit else ''}\" id=\"lane-{h(rank_label(lane.rank))}{start}\" "
                 f"data-rank=\"{h(rank_label(lane.rank))}\" data-culprit=\"{'true' if lane.culprit else 'false'}\"")
        sub = f"{lane.rank_count:,} ranks, shown: pid {lane.pid}" if lane.rank_count > 1 else f"pid {lane.pid}"
        if earlier:     # a rank the launcher replaced: drawn apart, not one of the job's ranks now
            attrs = f"class=\"lane earlier\" data-start=\"{lane.generation}\" data-of-rank=\"{h(rank_label(lane.rank))}\""
    now = lane.spans[-1].state if lane.spans else "-"
    tag = "<span class=\"tag\">CULPRIT</span>" if lane.culprit else ""
    label = (f"<div class=\"label\"><b title=\"{h(name)}\">{h(cut(name, 40))}</b>{tag}"
             f"<small>{h(sub)} · now {h(now)}</small></div>")
    return f"<div {attrs}>{label}{_lane_svg(lane, scale, worker)}</div>"


def _lane_svg(lane: Lane, scale: Scale, worker: bool) -> str:
    top = 0 if worker else STEP_H
    body = [f"<g class=\"spans\" transform=\"translate(0 {top})\">"]
    gone = scale.at_verdict(lane)
    body += [_span(s, scale) for s in (lane.spans[:-1] if gone else lane.spans)]
    if gone:
        body.append(_at_verdict(lane.spans[-1]))
    body.append("</g>")
    if lane.steps:
        ticks = "".join(f"M{scale.x(t)} 0v{STEP_H}" for t in lane.steps)
        body.append(f"<path class=\"step\" d=\"{ticks}\"><title>{len(lane.steps)} steps seen</title></path>")
    y = top + BAR_H + 2
    for name, series, top_value, unit in _series_of(lane, worker):
        body.append(_sparkline(name, series, top_value, unit, y, scale))
        y += SERIES_H + 2
    height = y
    if scale.onset_s is not None and scale.onset_s >= 0:
        body.append(f"<path class=\"onset\" d=\"M{scale.x(scale.onset_s)} 0v{height}\"/>")
    body += [f"<path class=\"restart\" {_RESTART_LOOK} d=\"M{scale.x(at)} 0v{height}\"/>" for at in scale.restarts_s]
    body.append(f"<path class=\"verdict-mark\" d=\"M{PLOT_W} 0v{height}\"/>")
    who = f"worker {lane.worker}" if worker else f"rank {rank_label(lane.rank)}"
    return (f"<svg viewBox=\"0 0 {VIEW_W} {height}\" role=\"img\" aria-label=\"{h(who)} timeline\">"
            + "".join(body) + "</svg>")


def _series_of(lane: Lane, worker: bool) -> list[tuple[str, tuple, float, str]]:
    out = []
    if lane.cpu_pct:
        top = max(100.0, max(v for _, v in lane.cpu_pct))
        out.append(("CPU" if worker else "main CPU", lane.cpu_pct, top, "%"))
    if lane.gpu_util_pct:
        out.append(("GPU", lane.gpu_util_pct, 100.0, "%"))
    if lane.gpu_power_w:
        out.append(("power", lane.gpu_power_w, max(v for _, v in lane.gpu_power_w) or 1.0, " W"))
    return out


def _span(span: Span, scale: Scale) -> str:
    x0, x1 = scale.x(span.start_s), scale.x(span.end_s)
    width = max(x1 - x0, 2.0)
    what = f"{span.state}: {span.detail}" if span.detail else span.state
    tip = f"{what} ({span.start_s:.1f}-{span.end_s:.1f} s)"
    rect = (f"<rect class=\"span\" data-state=\"{h(span.state)}\" x=\"{x0}\" y=\"0\" width=\"{round(width, 1)}\" "
            f"height=\"{BAR_H}\" fill=\"{_fill(span.state)}\"><title>{h(tip)}</title></rect>")
    room = int((width - 6) / CHAR_W)
    if room < 4:
        return rect
    ink = STATE_LOOK.get(span.state, ("", "#000", ""))[1]
    return rect + (f"<text x=\"{round(x0 + 3, 1)}\" y=\"{BAR_H - 6}\" fill=\"{ink}\" class=\"state-label\">"
                   f"{h(cut(what, room))}</text>")


def _at_verdict(span: Span) -> str:
    """A state first read at the last sample (a rank seen gone as the verdict was read) has no width
    on the plot: it is drawn right of the verdict line, named, so an exit never hides under it."""
    x = PLOT_W + GUTTER_PAD
    what = f"{span.state}: {span.detail}" if span.detail else span.state
    room = int((VIEW_W - x - AT_VERDICT_W - 3) / CHAR_W)
    return (f"<rect class=\"span at-verdict\" data-state=\"{h(span.state)}\" x=\"{x}\" y=\"3\" "
            f"width=\"{AT_VERDICT_W}\" height=\"{BAR_H - 6}\" fill=\"{_fill(span.state)}\">"
            f"<title>{h(what)} (at {span.end_s:.1f} s, the last sample)</title></rect>"
            f"<text x=\"{x + AT_VERDICT_W + 3}\" y=\"{BAR_H - 6}\" class=\"at-verdict-label\">"
            f"{h(cut(span.state, room))}</text>")


def _sparkline(name: str, series: tuple, top: float, unit: str, y: float, scale: Scale) -> str:
    def level(v: float) -> float:
        return round(y + SERIES_H - min(v, top) / top * (SERIES_H - 2) - 1, 1)

    points = " ".join(f"{scale.x(t)},{level(v)}" for t, v in series)
    if len(series) == 1:
        t, v = series[0]
        points = f"{scale.x(t) - 2},{level(v)} {scale.x(t) + 2},{level(v)}"
    last = series[-1][1]
    peak = max(v for _, v in series)
    return (f"<g class=\"series\" data-series=\"{h(name)}\"><rect class=\"series-bg\" x=\"0\" y=\"{y}\" "
            f"width=\"{PLOT_W}\" height=\"{SERIES_H}\"/><polyline points=\"{points}\"/>"
            f"<text x=\"{PLOT_W + 4}\" y=\"{y + SERIES_H - 4}\">{h(name)} {last:g}{unit}</text>"
            f"<title>{h(name)}: last {last:g}{unit}, peak {peak:g}{unit}</title></g>")


def _fill(state: str) -> str:
    colour, _, pattern = STATE_LOOK.get(state, ("#FFFFFF", "#000", "solid"))
    return colour if pattern == "solid" else f"url(#p-{state})"


def patterns_html() -> str:
    """The hatches every lane's SVG refers to, defined once (a hidden SVG: display:none would lose them)."""
    defs = []
    for state, (colour, _, pattern) in STATE_LOOK.items():
        if pattern == "solid":
            continue
        turn = " patternTransform=\"rotate(45)\"" if pattern != "dots" else ""
        defs.append(fill("pattern.svg", state=state, turn=turn, colour=colour,
                         mark=template_text(f"mark-{pattern}.svg")))
    return fill("defs.svg", patterns="".join(defs)) + "\n"
