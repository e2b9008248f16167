"""The report as Markdown, ready to paste into a GitHub issue."""
from __future__ import annotations

from typing import TextIO

from hangdoc.base.words import rank_ranges
from hangdoc.model import Report
from hangdoc.render.escape import md_cell, md_code, md_fence, md_text
from hangdoc.render.finding import finding_markdown
from hangdoc.render.layout import layout


def report_markdown(report: Report) -> str:
    doc = layout(report)
    lines = [f"## hangdoc: {md_text(doc.headline)}", ""]
    if doc.places:
        lines += [f"- {md_text(line)}" for line in doc.places] + [""]
    for line in doc.notes:
        lines += [md_text(line), ""]
    if doc.cause:
        lines += ["```text"] + [md_fence(line) for line in doc.cause] + ["```", ""]
    if doc.missing:
        lines += [f"- {md_text(line)}" for line in doc.missing] + [""]
    if doc.findings:
        lines += ["### Findings", ""]
    for finding in doc.findings:
        lines += finding_markdown(finding) + [""]
    lines += ["### Ranks", "", "| rank | pid | host | state | for | progress | GPU | top frame |",
              "|---:|---:|---|---|---:|---|---|---|"]
    for row in doc.rows:
        if row.worker:
            lines.append(f"| ↳ worker {row.rank.removeprefix('w')} | {row.pid} | | {md_cell(row.state)} | | | | "
                         f"`{md_code(row.top_frame)}` |")
            continue
        host = row.host
        if doc.spans_nodes and row.node not in ("", "-"):
            host = f"{host} ({row.node if row.node.endswith('nodes') else 'node ' + row.node})"
        lines.append(f"| {row.rank} | {row.pid} | {md_cell(host)} | {md_cell(row.state)} | {row.waiting} | "
                     f"{md_cell(row.progress)} | {md_cell(row.gpu)} | `{md_code(row.top_frame)}` |")
    lines.append("")
    for block in doc.stacks:
        if block.tree:
            lines += ["### Stack tree", "", block.heading, "", "```"] + [md_fence(t) for t in block.tree] + ["```", ""]
        if block.classes:
            lines += ["### Stacks by equivalence class", ""]
        for cls in block.classes:
            lines += [f"<details><summary>ranks {rank_ranges(cls.ranks)} ({len(cls.ranks)})</summary>", "",
                      "```"]
            lines += [md_fence(label) for label in cls.frames] or ["(no stack)"]
            lines += ["```", "", "</details>", ""]
    return "\n".join(lines)


def render_markdown(report: Report, out: TextIO) -> None:
    out.write(report_markdown(report) + "\n")
