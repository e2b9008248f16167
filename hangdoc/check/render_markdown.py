"""Write a check Document as Markdown: a PR comment or a CI job summary."""
from __future__ import annotations

from typing import TextIO

from hangdoc.check.sections import Document, Table, shown_evidence, shown_ranks
from hangdoc.render.escape import md_cell, md_text
from hangdoc.model import Finding
from hangdoc.registry import records


def _cell(text: str) -> str:
    return md_cell(text)


def render_markdown(doc: Document, out: TextIO) -> None:
    out.write(f"## {doc.heading}\n\n{doc.summary}\n")
    for finding in doc.findings:
        out.write(_finding(finding))
    for table in doc.tables:
        out.write(_table(table))


def _finding(f: Finding) -> str:
    ranks = f" ({shown_ranks(f)})" if f.ranks else ""
    lines = [f"\n### {f.severity.value.upper()} `{f.rule}`{ranks}\n", f"{md_text(f.title)}\n"]
    lines += [f"- {md_text(e)}" for e in shown_evidence(f)]
    lines.append(f"\n**Fix:** {md_text(f.fix)}")
    snippet = records()[f.rule].snippet if f.rule in records() else None
    if snippet:
        lines.append(f"\n```\n{snippet}\n```")
    return "\n".join(lines) + "\n"


def _table(table: Table) -> str:
    lines = [f"\n### {table.title}\n", "| " + " | ".join(map(_cell, table.columns)) + " |",
             "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in table.rows]
    if table.notes:
        lines.append("")
        lines += [f"_{_cell(note)}_  " for note in table.notes]
    return "\n".join(lines) + "\n"
