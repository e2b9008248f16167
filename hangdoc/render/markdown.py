"""The report as Markdown, ready to paste into a GitHub issue."""
from __future__ import annotations

from typing import TextIO

from hangdoc.analyze.classes import rank_ranges, stack_classes, stack_tree
from hangdoc.model import Bundle, Report
from hangdoc.render.escape import md_cell, md_code, md_fence, md_text
from hangdoc.render.text import culprit_places, group_cells, rank_rows, spans_nodes, stacks_heading
from hangdoc.render.words import (
    class_members, crash_cause, duration, gpu_cell, headline, missing_stacks, rank_label, row_ranks, threshold_line,
    timeout_line,
)


def report_markdown(report: Report, bundles: list[Bundle] | None = None) -> str:
    lines = [f"## hangdoc: {md_text(headline(report))}", ""]
    if (places := culprit_places(report)):
        lines += [f"- {md_text(line)}" for line in places] + [""]
    if (line := threshold_line(report)):
        lines += [md_text(line), ""]
    if (line := timeout_line(report)):
        lines += [md_text(line), ""]
    if (cause := crash_cause(report, bundles)):
        lines += ["```text"] + [md_fence(line) for line in cause] + ["```", ""]
    if (missing := missing_stacks(bundles)):
        lines += [f"- {md_text(line)}" for line in missing] + [""]
    if report.findings:
        lines += ["### Findings", ""]
    for finding in report.findings:
        ranks = f" (ranks {rank_ranges(finding.ranks)})" if finding.ranks else ""
        lines += [f"**{finding.severity.value}** `{md_code(finding.rule)}`{ranks}: {md_text(finding.title)}", ""]
        lines += [f"- {md_text(e).strip()}" for e in finding.evidence]
        lines += ["", f"**Fix:** {md_text(finding.fix)}", ""]
    lines += ["### Ranks", "", "| rank | pid | host | state | for | progress | GPU | top frame |",
              "|---:|---:|---|---|---:|---|---|---|"]
    nodes = spans_nodes(report)
    for rows in rank_rows(report):
        r = rows[0]
        if len(rows) > 1 or r.rank_count > 1:
            cells = group_cells(rows)
            node = cells["node"] if cells["node"].endswith("nodes") else f"node {cells['node']}"
            host = f"{cells['host']} ({node})" if nodes else cells["host"]
            lines.append(f"| {cells['rank']} | - | {md_cell(host)} | {md_cell(r.state)} | {cells['for']} | "
                         f"{md_cell(r.progress)} | - | `{md_code(r.top_frame)}` |")
            continue
        host = f"{r.host} (node {r.group_rank})" if nodes and r.group_rank is not None else r.host
        lines.append(f"| {rank_label(r.rank)} | {r.pid} | {md_cell(host)} | {md_cell(r.state)} | {duration(r.waiting_s)} | "
                     f"{md_cell(r.progress)} | {md_cell(gpu_cell(r.gpu))} | `{md_code(r.top_frame)}` |")
        for w in r.workers:
            index = w.index if w.index is not None else "?"
            lines.append(f"| ↳ worker {index} | {w.pid} | | {md_cell(w.state)} | | | | `{md_code(w.top_frame)}` |")
    lines.append("")
    members = class_members(report)
    for bundle in bundles or []:
        tree = stack_tree(bundle, members)
        if tree:
            lines += ["### Stack tree", "", stacks_heading(bundle, members), "", "```"] + [md_fence(t) for t in tree] + ["```", ""]
        classes = stack_classes(bundle, members)
        if classes:
            lines += ["### Stacks by equivalence class", ""]
        for cls in classes:
            lines += [f"<details><summary>ranks {rank_ranges(cls.ranks)} ({len(cls.ranks)})</summary>", "",
                      "```"]
            lines += [md_fence(f.label) for f in cls.frames] or ["(no stack)"]
            lines += ["```", "", "</details>", ""]
    return "\n".join(lines)


def render_markdown(report: Report, out: TextIO, bundles: list[Bundle] | None = None) -> None:
    out.write(report_markdown(report, bundles) + "\n")
