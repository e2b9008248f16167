"""The report as Markdown, ready to paste into a GitHub issue."""
from __future__ import annotations

from typing import TextIO

from hangdoc.base.words import rank_ranges
from hangdoc.model import Bundle, Report
from hangdoc.render.escape import md_cell, md_code, md_fence, md_text
from hangdoc.render.layout import layout


def report_markdown(report: Report, bundles: list[Bundle] | None = None) -> str:
    doc = layout(report, bundles)
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
        ranks = f" (ranks {rank_ranges(finding.ranks)})" if finding.ranks else ""
        lines += [f"**{finding.severity.value}** `{md_code(finding.rule)}`{ranks}: {md_text(finding.title)}", ""]
        lines += [f"- {md_text(e).strip()}" for e in finding.evidence]
        lines += ["", f"**Fix:** {md_text(finding.fix)}", ""]
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
            lines += [md_fence(f.label) for f in cls.frames] or ["(no stack)"]
            lines += ["```", "", "</details>", ""]
    return "\n".join(lines)


def render_markdown(report: Report, out: TextIO, bundles: list[Bundle] | None = None) -> None:
    out.write(report_markdown(report, bundles) + "\n")
