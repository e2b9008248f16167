"""Draw a check Document on a terminal with rich; plain text when not a TTY or NO_COLOR is set."""
from __future__ import annotations

import os
from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from hangdoc.check.model import CheckResult
from hangdoc.check.sections import Document, Table, layout
from hangdoc.model import Severity
from hangdoc.render.escape import terminal as esc
from hangdoc.render.finding import CHECK, draw_finding


def render_result(result: CheckResult, out: TextIO) -> None:
    """A check result, laid out in its sections."""
    render_text(layout(result), out)


def render_text(doc: Document, out: TextIO, width: int | None = None) -> None:
    plain = bool(os.environ.get("NO_COLOR")) or not out.isatty()
    console = Console(file=out, width=width, color_system=None if plain else "auto", highlight=False,
                      emoji=False, markup=False, force_terminal=False if plain else None)
    console.print(Text(doc.heading, style="bold"))
    console.print(doc.summary)
    for finding in doc.findings:
        # On a terminal an info finding stays short: no code under its fix (Markdown shows it).
        snippet = doc.snippets.get(finding.rule) if finding.severity is not Severity.INFO else None
        draw_finding(console, finding, CHECK, snippet)
    for table in doc.tables:
        _table(console, table)


def _table(console: Console, table: Table) -> None:
    console.print()
    grid = RichTable(title=table.title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                     pad_edge=False, show_edge=False)
    for column in table.columns:
        grid.add_column(column, overflow="fold")
    for row in table.rows:
        grid.add_row(*(Text(esc(cell)) for cell in row))
    console.print(grid)
    for note in table.notes:
        console.print(Text(f"note: {note}", style="dim"))
