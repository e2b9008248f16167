"""The report as one self-contained HTML page: the verdict and the findings as the text report
says them, every rank's timeline (its DataLoader workers folded under it; `render/html_timeline.py`
draws it), the ranks table and the stacks as a tree.

No script and nothing fetched: styles inline, the pictures inline SVG, so the page opens from
disk, prints, and can be attached to an issue.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TextIO

from hangdoc.base.words import cut, rank_ranges
from hangdoc.model import REPORT_SCHEMA, Finding, Report, StackClass
from hangdoc.render.escape import html_text as h
from hangdoc.render.finding import REPORT, shown_evidence, shown_ranks
from hangdoc.render.html_timeline import patterns_html, timeline_html, watch_end
from hangdoc.render.layout import ReportLayout, Row, layout
from hangdoc.render.template import template_text

MAX_TREE_CHAIN = 6      # frames of a single-branch chain shown before its middle folds
# The browser itself holds the page to "no script, nothing fetched": only the inline style may apply.
CSP = "default-src 'none'; style-src 'unsafe-inline'"
_LABEL = re.compile(r"^(.*) \(([^()]*)\)$")     # "all_reduce (torch/distributed/distributed_c10d.py:3252)"


def render_html(report: Report, out: TextIO) -> None:
    out.write(report_html(report))


def report_html(report: Report) -> str:
    doc = layout(report)
    parts = [_head(doc.headline), _header(report, doc), timeline_html(report), _findings(doc.findings),
             _ranks_table(doc), _stacks(doc), _FOOT, "</body>\n</html>\n"]
    # ASCII whatever the job's strings hold: the page reads right from any file system and locale.
    return "".join(p for p in parts if p).encode("ascii", "xmlcharrefreplace").decode("ascii")


# --- the page around --------------------------------------------------------------------

def _head(headline: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>hangdoc: {h(headline)}</title>\n"
            f"<style>\n{template_text('report.css')}\n</style>\n</head>\n<body>\n{patterns_html()}")


def _header(report: Report, doc: ReportLayout) -> str:
    watched = watch_end(report.lanes)
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
        items.append(f"<li><span class=\"who\">{h(cut(who, 80))}</span><ol class=\"frames\">{''.join(frames)}</ol>"
                     f"{inner}</li>")
    deeper = {r for child in node.children.values() for r in child.ranks}
    here = sorted({r for r in node.ranks if r not in deeper})
    if here:
        why = "(no stack)" if root else "(innermost frame above)"
        who = f"rank{'s' if len(here) > 1 else ''} {rank_ranges(here)}"
        items.append(f"<li><span class=\"who\">{h(cut(who, 80))}</span> <span class=\"loc\">{why}</span></li>")
    return "".join(items)


def _frame(label: str) -> str:
    match = _LABEL.match(label)
    if match is None:
        return f"<li><code>{h(label)}</code></li>"
    return f"<li><code>{h(match.group(1))}</code> <span class=\"loc\">{h(match.group(2))}</span></li>"


_FOOT = ("<footer>Written by hangdoc (" + REPORT_SCHEMA + "). This page is one file: no script, nothing "
         "fetched. The same timeline as a trace for Perfetto: <code>hangdoc report BUNDLE --format trace</code>."
         "</footer>\n")
