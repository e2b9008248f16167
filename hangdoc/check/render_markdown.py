"""Write a check Document as Markdown: a PR comment or a CI job summary."""
from __future__ import annotations

from typing import TextIO

from hangdoc.advice import ADVICE
from hangdoc.check.sections import Document, Table
from hangdoc.model import Finding


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(doc: Document, out: TextIO) -> None:
    out.write(f"## {doc.heading}\n\n{doc.summary}\n")
    for finding in doc.findings:
        out.write(_finding(finding))
    for table in doc.tables:
        out.write(_table(table))


def _finding(f: Finding) -> str:
    ranks = f" (rank{'s' if len(f.ranks) > 1 else ''} {', '.join(map(str, f.ranks))})" if f.ranks else ""
    lines = [f"\n### {f.severity.value.upper()} `{f.rule}`{ranks}\n", f"{f.title}\n"]
    lines += [f"- {_cell(e)}" for e in f.evidence]
    lines.append(f"\n**Fix:** {f.fix}")
    snippet = ADVICE[f.rule].snippet if f.rule in ADVICE else None
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
