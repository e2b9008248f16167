"""Draw a check Document on a terminal with rich; plain text when not a TTY or NO_COLOR is set."""
from __future__ import annotations

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
from hangdoc.render.text import make_console


def render_result(result: CheckResult, out: TextIO) -> None:
    """A check result, laid out in its sections."""
    render_text(layout(result), out)


def render_text(doc: Document, out: TextIO, width: int | None = None) -> None:
    """Wrapped at `width` (or the terminal's); piped with no width, never wrapped, as the report is."""
    console = make_console(out, width)
    fold = "fold" if console.is_terminal or width is not None else "ignore"
    console.print(Text(doc.heading, style="bold"))
    console.print(Text(doc.summary), soft_wrap=not console.is_terminal and width is None)
    for finding in doc.findings:
        # On a terminal an info finding stays short: no code under its fix (Markdown shows it).
        snippet = doc.snippets.get(finding.rule) if finding.severity is not Severity.INFO else None
        draw_finding(console, finding, CHECK, snippet, overflow=fold)
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
