"""The report as one self-contained HTML page: the verdict and the findings as the text report
says them, every rank's timeline (its DataLoader workers folded under it), the ranks table and
the stacks as a tree.

No script and nothing fetched: styles inline, the pictures inline SVG, so the page opens from
disk, prints, and can be attached to an issue. Colours are the Okabe-Ito palette, and every
state also has its name on the lane (where it fits), in the legend and in the span's tooltip;
waits are hatched, so the picture reads without colour too.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import TextIO

from hangdoc.base.words import rank_label, rank_ranges
from hangdoc.model import REPORT_SCHEMA, Finding, Lane, Report, Span, StackClass
from hangdoc.render.escape import plain
from hangdoc.render.finding import REPORT, shown_evidence, shown_ranks
from hangdoc.render.layout import ReportLayout, Row, layout
from hangdoc.render.words import span as long_span

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
MAX_TREE_CHAIN = 6      # frames of a single-branch chain shown before its middle folds

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
}
STATE_WORDS = {
    "collective-wait": "waits in a collective", "dataloader-wait": "waits for its DataLoader",
    "compute": "runs code", "io": "file I/O", "idle": "asleep", "exited": "gone", "unknown": "not read",
    "decompressing": "worker decompresses", "decoding": "worker decodes", "reading": "worker reads",
    "busy": "worker runs dataset code", "lock-wait": "worker waits on a lock", "queue-put": "worker waits to hand over",
}
# The browser itself holds the page to "no script, nothing fetched": only the inline style may apply.
CSP = "default-src 'none'; style-src 'unsafe-inline'"
_LABEL = re.compile(r"^(.*) \(([^()]*)\)$")     # "all_reduce (torch/distributed/distributed_c10d.py:3252)"


def h(text: object) -> str:
    """Job-controlled text for HTML: redacted, control characters shown, then escaped (quotes too)."""
    return html.escape(plain(str(text) if text is not None else ""), quote=True)


def render_html(report: Report, out: TextIO) -> None:
    out.write(report_html(report))


def report_html(report: Report) -> str:
    doc = layout(report)
    parts = [_head(doc.headline), _header(report, doc), _timeline(report), _findings(doc.findings),
             _ranks_table(doc), _stacks(doc), _FOOT, "</body>\n</html>\n"]
    # ASCII whatever the job's strings hold: the page reads right from any file system and locale.
    return "".join(p for p in parts if p).encode("ascii", "xmlcharrefreplace").decode("ascii")


# --- the page around --------------------------------------------------------------------

def _head(headline: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>hangdoc: {h(headline)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{_patterns()}")


def _header(report: Report, doc: ReportLayout) -> str:
    watched = _end(report.lanes)
    meta = [f"host {h(report.host)}" if report.host else "",
            f"{report.samples} sample{'s' if report.samples != 1 else ''} over {watched:.1f} s"
            if report.samples else "",
            f"{report.ranks_seen} rank{'s' if report.ranks_seen != 1 else ''}", REPORT_SCHEMA]
    out = [f"<header class=\"verdict {'alarm' if doc.alarm else 'calm'}\">",
           f"<h1 id=\"headline\">hangdoc: {h(doc.headline)}</h1>",
           f"<p class=\"meta\">{' · '.join(m for m in meta if m)}</p>", "</header>"]
    if doc.places:
        out.append("<ul class=\"places\">" + "".join(f"<li>{h(line)}</li>" for line in doc.places) + "</ul>")
    out += [f"<p class=\"note\">{h(line)}</p>" for line in doc.notes]
    if doc.cause:
        out.append("<pre class=\"cause\">" + "\n".join(h(line) for line in doc.cause) + "</pre>")
    if doc.missing:
        out.append("<ul class=\"missing\">" + "".join(f"<li>{h(line)}</li>" for line in doc.missing) + "</ul>")
    return "\n".join(out) + "\n"


# --- the timeline -------------------------------------------------------------------------

@dataclass(frozen=True)
class Scale:
    """Seconds from the first sample to SVG units; the watch's end is where the verdict was read
    (a report of one sample is all at that line)."""

    end_s: float
    onset_s: float | None = None

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


def _end(lanes: tuple[Lane, ...]) -> float:
    ends = [s.end_s for lane in lanes for each in (lane, *lane.workers) for s in each.spans[-1:]]
    return max(ends, default=0.0)


def _timeline(report: Report) -> str:
    if not report.lanes:
        return ""
    end = _end(report.lanes)
    onset = None
    if report.detected_after_s is not None:
        onset = end - report.detected_after_s
        onset = max(0.0, onset) if onset > -0.1 else onset    # detected_after_s is rounded to 0.1 s
    scale = Scale(end, onset)
    states = {s.state for lane in report.lanes for each in (lane, *lane.workers) for s in each.spans}
    watched = (f"over the {end:.1f} s hangdoc watched (0 s: its first sample)" if end > 0
               else "at the one sample hangdoc read")
    gone = any(scale.at_verdict(each) for lane in report.lanes for each in (lane, *lane.workers))
    out = ["<section id=\"timeline\">", "<h2>Timeline</h2>",
           f"<p class=\"caption\">Each rank's main thread {watched}, its DataLoader workers folded under it. "
           "Ticks above a lane: the rank's loop stepped."
           + (" A state first read at the last sample (a rank seen gone) is right of the verdict line." if gone else "")
           + _onset_words(report, onset) + "</p>",
           _legend(states, onset is not None and onset >= 0), "<div class=\"lanes\">", _axis(scale, report)]
    for lane in report.lanes:
        out.append(_rank_block(lane, scale))
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
    what = "the first rank exited" if report.verdict == "crash" else "the stall began"
    return f" Dashed line: {what} ({onset:.1f} s); solid line: the verdict, at the last sample."


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else long_span(value)


def _legend(states: set[str], onset: bool) -> str:
    items = []
    for state in sorted(states, key=lambda s: list(STATE_LOOK).index(s) if s in STATE_LOOK else 99):
        items.append(f"<li><svg class=\"swatch\" viewBox=\"0 0 24 14\" aria-hidden=\"true\"><rect width=\"24\" "
                     f"height=\"14\" fill=\"{_fill(state)}\" stroke=\"#333\" stroke-width=\".5\"/></svg>"
                     f"<b>{h(state)}</b> {h(STATE_WORDS.get(state, ''))}</li>")
    items.append("<li><svg class=\"swatch\" viewBox=\"0 0 24 14\" aria-hidden=\"true\"><path d=\"M12 0v8\" "
                 "class=\"step\"/></svg>step</li>")
    if onset:
        items.append("<li><svg class=\"swatch\" viewBox=\"0 0 24 14\" aria-hidden=\"true\"><path d=\"M12 0v14\" "
                     "class=\"onset\"/></svg>onset</li>")
    items.append("<li><svg class=\"swatch\" viewBox=\"0 0 24 14\" aria-hidden=\"true\"><path d=\"M12 0v14\" "
                 "class=\"verdict-mark\"/></svg>verdict</li>")
    return "<ul class=\"legend\">" + "".join(items) + "</ul>"


def _axis(scale: Scale, report: Report) -> str:
    step = next((s for s in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)
                 if scale.end_s / s <= 10), 7200)
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
    marks.append(f"<path class=\"verdict-mark\" d=\"M{PLOT_W} 0v24\"/><text x=\"{PLOT_W + 4}\" y=\"12\" "
                 f"class=\"verdict-word\">{h(str(report.verdict).upper())}</text>")
    return (f"<div class=\"lane axis\"><div class=\"label\">time</div><svg viewBox=\"0 0 {VIEW_W} 24\" "
            "role=\"img\" aria-label=\"time axis\">" + "".join(ticks) + "".join(marks) + "</svg></div>")


def _rank_block(lane: Lane, scale: Scale) -> str:
    culprit = " culprit" if lane.culprit else ""
    out = [f"<div class=\"rank-block{culprit}\">", _lane_row(lane, scale, worker=False)]
    if lane.workers:
        count = len(lane.workers)
        out.append(f"<details class=\"workers\"{' open' if lane.culprit else ''}><summary>{count} DataLoader "
                   f"worker{'s' if count != 1 else ''} of rank {h(rank_label(lane.rank))}</summary>")
        out += [_lane_row(w, scale, worker=True) for w in lane.workers]
        out.append("</details>")
    out.append("</div>")
    return "\n".join(out)


def _lane_row(lane: Lane, scale: Scale, worker: bool) -> str:
    if worker:
        index = lane.worker if lane.worker is not None else "?"
        name = f"worker {index}"
        attrs = f"class=\"lane worker\" data-rank=\"{h(rank_label(lane.rank))}\" data-worker=\"{h(index)}\""
        sub = f"pid {lane.pid}"
    else:
        name = f"ranks {lane.rank_set}" if lane.rank_set else f"rank {rank_label(lane.rank)}"
        attrs = (f"class=\"lane rank{' culprit' if lane.culprit else ''}\" id=\"lane-{h(rank_label(lane.rank))}\" "
                 f"data-rank=\"{h(rank_label(lane.rank))}\" data-culprit=\"{'true' if lane.culprit else 'false'}\"")
        sub = f"{lane.rank_count:,} ranks, shown: pid {lane.pid}" if lane.rank_count > 1 else f"pid {lane.pid}"
    now = lane.spans[-1].state if lane.spans else "-"
    tag = "<span class=\"tag\">CULPRIT</span>" if lane.culprit else ""
    label = (f"<div class=\"label\"><b title=\"{h(name)}\">{h(_cut(name, 40))}</b>{tag}"
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
                   f"{h(_cut(what, room))}</text>")


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
            f"{h(_cut(span.state, room))}</text>")


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


def _patterns() -> str:
    """The hatches every lane's SVG refers to, defined once (a hidden SVG: display:none would lose them)."""
    marks = {"hatch": "<path d=\"M0 0V6\" stroke=\"#fff\" stroke-opacity=\".55\" stroke-width=\"2\"/>",
             "dots": "<circle cx=\"3\" cy=\"3\" r=\"1\" fill=\"#777\"/>",
             "cross": "<path d=\"M0 0V6M0 3H6\" stroke=\"#bbb\" stroke-width=\"1\"/>"}
    defs = []
    for state, (colour, _, pattern) in STATE_LOOK.items():
        if pattern == "solid":
            continue
        turn = " patternTransform=\"rotate(45)\"" if pattern != "dots" else ""
        defs.append(f"<pattern id=\"p-{state}\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\"{turn}>"
                    f"<rect width=\"6\" height=\"6\" fill=\"{colour}\"/>{marks[pattern]}</pattern>")
    return ("<svg class=\"defs\" width=\"0\" height=\"0\" aria-hidden=\"true\" focusable=\"false\"><defs>"
            + "".join(defs) + "</defs></svg>\n")


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[:max(1, room - 1)] + "…"


# --- the findings, the table, the stacks ----------------------------------------------------

def _findings(findings: tuple[Finding, ...]) -> str:
    if not findings:
        return ""
    out = ["<section id=\"findings\">", "<h2>Findings</h2>"]
    for f in findings:
        severity = f.severity.value
        ranks = f" <span class=\"ranks\">({h(shown_ranks(f.ranks))})</span>" if f.ranks else ""
        evidence = "".join(f"<li>{h(line.strip())}</li>" for line in shown_evidence(f, REPORT.max_evidence))
        out.append(f"<article class=\"finding sev-{severity}\" data-rule=\"{h(f.rule)}\">"
                   f"<h3><span class=\"sev\">{severity.upper()}</span> <code>{h(f.rule)}</code>{ranks} {h(f.title)}</h3>"
                   + (f"<ul class=\"evidence\">{evidence}</ul>" if evidence else "")
                   + f"<p class=\"fix\"><b>fix:</b> {h(f.fix)}</p>"
                   f"<p class=\"explain\">more: <code>hangdoc explain {h(f.rule)}</code></p></article>")
    out.append("</section>")
    return "\n".join(out) + "\n"


def _ranks_table(doc: ReportLayout) -> str:
    if not doc.rows:
        return ""
    where = ("node", "host") if doc.spans_nodes else ()
    names = ("rank", "pid", *where, "state", "for", "progress", "GPU", "top frame")
    out = ["<section id=\"ranks\">", "<h2>Ranks</h2>", "<table>",
           "<thead><tr>" + "".join(f"<th>{n}</th>" for n in names) + "</tr></thead>", "<tbody>"]
    out += [_row(row, doc.spans_nodes) for row in doc.rows]
    out += ["</tbody>", "</table>", "</section>"]
    return "\n".join(out) + "\n"


def _row(row: Row, spans_nodes: bool) -> str:
    kind = "worker" if row.worker else "culprit" if row.culprit else "group" if row.group else ""
    rank = f"↳ worker {row.rank.removeprefix('w')}" if row.worker else row.rank
    cells = [rank, row.pid, *((row.node, row.host) if spans_nodes else ()), row.state, row.waiting,
             row.progress, row.gpu]
    return (f"<tr class=\"{kind}\">" + "".join(f"<td>{h(c)}</td>" for c in cells)
            + f"<td><code>{h(row.top_frame)}</code></td></tr>")


def _stacks(doc: ReportLayout) -> str:
    blocks = [b for b in doc.stacks if b.classes or b.tree]
    if not blocks:
        return ""
    out = ["<section id=\"stacks\">", "<h2>Stacks</h2>"]
    for block in blocks:
        out.append(f"<p>{h(block.heading)}</p>")
        if block.classes:
            out.append("<ul class=\"tree\">" + _tree(_prefix_tree(block.classes)) + "</ul>")
        else:
            out.append("<pre>" + "\n".join(h(line) for line in block.tree) + "</pre>")
    out.append("</section>")
    return "\n".join(out) + "\n"


@dataclass
class _Node:
    label: str
    ranks: list[int] = field(default_factory=list)
    children: dict[str, _Node] = field(default_factory=dict)


def _prefix_tree(classes: tuple[StackClass, ...]) -> _Node:
    """The classes' stacks merged from the outermost frame in, each frame with the ranks that reached it
    (LLNL's STAT draws them so)."""
    root = _Node("")
    for cls in classes:
        node = root
        node.ranks += cls.ranks
        for label in reversed(cls.frames):
            node = node.children.setdefault(label, _Node(label))
            node.ranks += cls.ranks
    return root


def _tree(node: _Node, root: bool = True) -> str:
    """The children of `node` as list items, the most ranks first; a chain of single children over
    the same ranks is one item of frames (its middle folded when long). Ranks that go no deeper than
    `node` say so, as the text report's tree does; at the root, those are the ranks without a stack."""
    items = []
    for child in sorted(node.children.values(), key=lambda c: (-len(set(c.ranks)), min(c.ranks, default=0))):
        chain = [child]
        while len(chain[-1].children) == 1 and next(iter(chain[-1].children.values())).ranks == chain[-1].ranks:
            chain.append(next(iter(chain[-1].children.values())))
        frames = [_frame(n.label) for n in chain]
        if len(frames) > MAX_TREE_CHAIN:
            middle = frames[2:-3]
            frames = frames[:2] + [f"<li><details><summary>{len(middle)} more frames</summary><ol>"
                                   + "".join(middle) + "</ol></details></li>"] + frames[-3:]
        ranks = chain[0].ranks
        who = f"rank{'s' if len(ranks) > 1 else ''} {rank_ranges(sorted(set(ranks)))}"
        inner = f"<ul>{_tree(chain[-1], root=False)}</ul>" if chain[-1].children else ""
        items.append(f"<li><span class=\"who\">{h(_cut(who, 80))}</span><ol class=\"frames\">{''.join(frames)}</ol>"
                     f"{inner}</li>")
    deeper = {r for child in node.children.values() for r in child.ranks}
    here = sorted({r for r in node.ranks if r not in deeper})
    if here:
        why = "(no stack)" if root else "(innermost frame above)"
        who = f"rank{'s' if len(here) > 1 else ''} {rank_ranges(here)}"
        items.append(f"<li><span class=\"who\">{h(_cut(who, 80))}</span> <span class=\"loc\">{why}</span></li>")
    return "".join(items)


def _frame(label: str) -> str:
    match = _LABEL.match(label)
    if match is None:
        return f"<li><code>{h(label)}</code></li>"
    return f"<li><code>{h(match.group(1))}</code> <span class=\"loc\">{h(match.group(2))}</span></li>"


_FOOT = ("<footer>Written by hangdoc (" + REPORT_SCHEMA + "). This page is one file: no script, nothing "
         "fetched. The same timeline as a trace for Perfetto: <code>hangdoc report BUNDLE --format trace</code>."
         "</footer>\n")

_CSS = """
:root{--ink:#1a1a1a;--muted:#555;--line:#ccc;--culprit:#D55E00;--bg-culprit:#fdeee4}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--ink);
margin:0 auto;max-width:1280px;padding:1rem 1.5rem 2rem;background:#fff}
code,pre,.loc{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.92em}
h1{font-size:1.35rem;margin:0}h2{font-size:1.1rem;margin:1.6rem 0 .5rem;border-bottom:1px solid var(--line)}
h3{font-size:1rem;margin:0 0 .3rem}
.verdict{padding:.7rem 1rem;border-left:8px solid;border-radius:3px}
.verdict.alarm{border-color:var(--culprit);background:var(--bg-culprit)}
.verdict.calm{border-color:#009E73;background:#e6f5ef}
.meta,.caption,.more,.explain,footer{color:var(--muted);font-size:.9em}.meta{margin:.2rem 0 0}
.note{margin:.4rem 0}.cause{background:#f6f6f6;padding:.5rem;white-space:pre-wrap}
.legend{list-style:none;padding:0;margin:.3rem 0 .6rem;display:flex;flex-wrap:wrap;gap:.3rem 1rem;font-size:.9em}
.legend li{display:flex;align-items:center;gap:.3rem}.swatch{width:24px;height:14px}
.lanes{border-top:1px solid var(--line)}
.lane{display:grid;grid-template-columns:12rem minmax(0,1fr);gap:.6rem;align-items:center;padding:.15rem .3rem}
.lane svg{width:100%;height:auto;display:block;overflow:visible}
.lane .label{overflow-wrap:anywhere;line-height:1.2}.lane .label small{display:block;color:var(--muted)}
.rank-block{border-bottom:1px solid var(--line);border-left:6px solid transparent}
.rank-block.culprit{border-left-color:var(--culprit);background:var(--bg-culprit)}
.tag{margin-left:.4rem;padding:0 .3rem;font-size:.75em;font-weight:700;color:#fff;background:var(--culprit);border-radius:2px}
details.workers{margin:0 0 .2rem}details.workers summary{cursor:pointer;color:var(--muted);font-size:.9em;padding-left:1rem}
.lane.worker .label{padding-left:1.6rem}
.axis text,.lane text{font-size:11px;font-family:system-ui,"DejaVu Sans",sans-serif}
.axis path{stroke:#777}.axis{font-size:.9em;color:var(--muted)}
.span{stroke:#fff;stroke-width:.5}.state-label{pointer-events:none}
.span.at-verdict{stroke:#333}.at-verdict-label{font-weight:700}
.step{stroke:#000;stroke-width:1.2}
.onset{stroke:var(--culprit);stroke-width:2;stroke-dasharray:4 3}
.verdict-mark{stroke:#000;stroke-width:2}.verdict-word{font-weight:700}
.series-bg{fill:#f4f4f4}.series polyline{fill:none;stroke:#0072B2;stroke-width:1.5}.series text{fill:var(--muted)}
.finding{border-left:6px solid #999;padding:.4rem .8rem;margin:.8rem 0;background:#fafafa}
.finding.sev-critical{border-color:var(--culprit)}.finding.sev-warning{border-color:#E69F00}
.finding.sev-info{border-color:#56B4E9}.sev{font-weight:800;letter-spacing:.03em}
.evidence{margin:.2rem 0;padding-left:1.2rem}.evidence li{overflow-wrap:anywhere}.fix{margin:.3rem 0}
table{border-collapse:collapse;width:100%;font-size:.92em}th,td{text-align:left;padding:.2rem .5rem;
border-bottom:1px solid #eee;vertical-align:top}td code{overflow-wrap:anywhere}
tr.culprit{background:var(--bg-culprit);font-weight:700}tr.worker td{color:var(--muted)}
.tree,.tree ul{list-style:none;padding-left:1.1rem;margin:.2rem 0}.tree{padding-left:0}
.tree li{margin:.15rem 0}.who{font-weight:700;font-size:.9em}
.frames{margin:.1rem 0 .1rem .2rem;padding-left:1rem;border-left:2px solid var(--line);list-style:none}
.loc{color:var(--muted)}
footer{margin-top:2rem;border-top:1px solid var(--line);padding-top:.5rem}
.defs{position:absolute;width:0;height:0;overflow:hidden}
@media print{body{max-width:none;padding:0;font-size:10pt}*{-webkit-print-color-adjust:exact;print-color-adjust:exact}
.rank-block,.finding,tr{break-inside:avoid}h2{break-after:avoid}
details::details-content{content-visibility:visible;display:block}details>summary{list-style:none}}
"""
