"""The report for a terminal: rich when it can, plain when piped or NO_COLOR is set."""
from __future__ import annotations

import os
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from hangdoc.model import Report
from hangdoc.render.words import duration, rank_label, gpu_cell, headline, timeout_line

_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def make_console(out: TextIO, width: int | None = None) -> Console:
    tty = getattr(out, "isatty", lambda: False)()
    plain = bool(os.environ.get("NO_COLOR")) or not tty
    if width is None and not tty:
        # Piped into a file or a CI log: keep frames on one line rather than rich's 80 columns.
        width = int(os.environ.get("COLUMNS") or 160)
    return Console(file=out, width=width, no_color=plain, color_system=None if plain else "auto",
                   highlight=False, soft_wrap=False, emoji=False)


def render_text(report: Report, out: TextIO, width: int | None = None) -> None:
    console = make_console(out, width)
    style = "bold red" if report.verdict in ("hang", "crash") else "bold green"
    console.print(Text(f"hangdoc: {headline(report)}", style=style))
    if (line := timeout_line(report)):
        console.print(line)
    for finding in report.findings:
        sev = finding.severity.value
        console.print()
        console.print(Text.assemble((f"{sev.upper():<8} ", _SEVERITY_STYLE.get(sev, "")),
                                    (finding.rule, "bold"), "  ", finding.title))
        for line in finding.evidence:
            console.print(Text("    " + line), overflow="fold")
        console.print(Text.assemble(("  fix: ", "bold"), finding.fix), overflow="fold")
    if report.ranks:
        console.print()
        console.print(ranks_table(report))


def ranks_table(report: Report) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in ("RANK", "PID", "STATE", "FOR", "PROGRESS", "GPU", "TOP FRAME"):
        table.add_column(name, no_wrap=name != "TOP FRAME", overflow="fold")
    culprits = set(report.culprit_ranks)
    for rank in report.ranks:
        style = "bold red" if rank.rank in culprits else ""
        table.add_row(rank_label(rank.rank), str(rank.pid), rank.state, duration(rank.waiting_s), rank.progress,
                      gpu_cell(rank.gpu), rank.top_frame or "-", style=style)
        for worker in rank.workers:
            index = worker.index if worker.index is not None else "?"
            table.add_row(f"  w{index}", str(worker.pid), worker.state, "", "", "", worker.top_frame or "-",
                          style="dim")
    return table
