"""The report for a terminal: rich when it can, plain when piped or NO_COLOR is set."""
from __future__ import annotations

import os
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from hangdoc.model import Report
from hangdoc.render.escape import terminal as esc
from hangdoc.render.finding import draw_finding
from hangdoc.render.layout import ReportLayout, layout

# Lines are not wrapped when not on a terminal; this only bounds rich's layout.
PIPED_WIDTH = 4096


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich exits 1 here; the command knows its exit code (a hang is still 3 under `| head`).
        raise BrokenPipeError


def make_console(out: TextIO, width: int | None = None, terminal: bool | None = None) -> Console:
    """`terminal`: draw as on a terminal (wrapping at `width`) whatever `out` is; None: ask `out`."""
    tty = getattr(out, "isatty", lambda: False)() if terminal is None else terminal
    plain = bool(os.environ.get("NO_COLOR")) or not tty
    if width is None and not tty:
        # Piped into a file or a CI log: never wrap (a suggested command must copy-paste whole).
        width = PIPED_WIDTH
    return _Console(file=out, width=width, no_color=plain, color_system=None if plain else "auto",
                   force_terminal=tty, highlight=False, soft_wrap=False, emoji=False)


def render_text(report: Report, out: TextIO, width: int | None = None, terminal: bool | None = None) -> None:
    draw_text(layout(report), out, width, terminal)


def draw_text(doc: ReportLayout, out: TextIO, width: int | None = None, terminal: bool | None = None) -> None:
    console = make_console(out, width, terminal)
    fold = "fold" if console.is_terminal else "ignore"
    console.print(Text(f"hangdoc: {esc(doc.headline)}", style="bold red" if doc.alarm else "bold green"))
    for line in doc.places:
        console.print(Text(f"  {esc(line)}", style="bold"))
    for line in doc.notes:
        console.print(Text(esc(line)))
    for line in doc.cause:
        console.print(Text(f"  {esc(line)}", style="bold"), soft_wrap=not console.is_terminal)
    for line in doc.missing:
        console.print(Text(f"  {esc(line)}", style="yellow"), soft_wrap=not console.is_terminal)
    for finding in doc.findings:
        draw_finding(console, finding, overflow=fold)
    if doc.rows:
        console.print()
        console.print(ranks_table(doc))
    for block in doc.stacks:
        if block.tree:
            console.print()
            console.print(Text(block.heading, style="bold"))
            for line in block.tree:
                console.print(Text("  " + esc(line)), overflow=fold)


def ranks_table(doc: ReportLayout) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    where = ("NODE", "HOST") if doc.spans_nodes else ()
    for name in ("RANK", "PID", *where, "STATE", "FOR", "PROGRESS", "GPU", "TOP FRAME"):
        table.add_column(name, no_wrap=name != "TOP FRAME", overflow="fold")
    for row in doc.rows:
        node_cells = (row.node, esc(row.host)) if doc.spans_nodes else ()
        style = "dim" if row.worker else "bold red" if row.culprit else ""
        rank = f"  {row.rank}" if row.worker else row.rank
        table.add_row(rank, row.pid, *node_cells, esc(row.state), row.waiting, esc(row.progress), row.gpu,
                      esc(row.top_frame), style=style)
    return table
