"""Write a check Document as Markdown: a PR comment or a CI job summary."""
from __future__ import annotations

from typing import TextIO

from hangdoc.check.model import CheckResult
from hangdoc.check.sections import Document, Table, layout
from hangdoc.render.escape import md_cell
from hangdoc.render.finding import CHECK, finding_markdown


def render_result(result: CheckResult, out: TextIO) -> None:
    """A check result, laid out in its sections."""
    render_markdown(layout(result), out)


def render_markdown(doc: Document, out: TextIO) -> None:
    out.write(f"## {doc.heading}\n\n{doc.summary}\n")
    for finding in doc.findings:
        out.write("\n" + "\n".join(finding_markdown(finding, CHECK, doc.snippets.get(finding.rule))) + "\n")
    for table in doc.tables:
        out.write(_table(table))


def _table(table: Table) -> str:
    lines = [f"\n### {table.title}\n", "| " + " | ".join(map(md_cell, table.columns)) + " |",
             "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(map(md_cell, row)) + " |" for row in table.rows]
    if table.notes:
        lines.append("")
        lines += [f"_{md_cell(note)}_  " for note in table.notes]
    return "\n".join(lines) + "\n"
