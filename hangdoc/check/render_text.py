"""Draw a check Document on a terminal with rich; plain text when not a TTY or NO_COLOR is set."""
from __future__ import annotations

import os
from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from hangdoc.check.sections import Document, Table, shown_evidence, shown_ranks
from hangdoc.render.escape import terminal as esc
from hangdoc.model import Finding, Severity
from hangdoc.registry import records

STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "cyan"}


def render_text(doc: Document, out: TextIO, width: int | None = None) -> None:
    plain = bool(os.environ.get("NO_COLOR")) or not out.isatty()
    console = Console(file=out, width=width, color_system=None if plain else "auto", highlight=False,
                      emoji=False, markup=False, force_terminal=False if plain else None)
    console.print(Text(doc.heading, style="bold"))
    console.print(doc.summary)
    for finding in doc.findings:
        _finding(console, finding)
    for table in doc.tables:
        _table(console, table)


def _finding(console: Console, f: Finding) -> None:
    console.print()
    head = Text(f"{f.severity.value.upper():<8} ", style=STYLE[f.severity])
    head.append(f.rule, style="bold")
    if f.ranks:
        head.append(f"  {shown_ranks(f)}")
    console.print(head)
    console.print(Text(f"  {esc(f.title)}"))
    for line in shown_evidence(f):
        console.print(Text(f"  - {esc(line)}", style="dim"))
    console.print(Text(f"  fix: {esc(f.fix)}", style="green"))
    snippet = records()[f.rule].snippet if f.rule in records() else None
    if snippet and f.severity is not Severity.INFO:
        for line in snippet.splitlines():
            console.print(Text(f"      {line}", style="green"))


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
