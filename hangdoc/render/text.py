"""The report for a terminal: rich when it can, plain when piped or NO_COLOR is set."""
from __future__ import annotations

import os
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from hangdoc.analyze.classes import rank_ranges, rank_set, stack_classes, stack_tree
from hangdoc.model import Bundle, RankReport, Report
from hangdoc.render.escape import terminal as esc
from hangdoc.render.words import (
    class_members, crash_cause, duration, gpu_cell, headline, missing_stacks, rank_label, row_ranks, threshold_line,
    timeout_line,
)

_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
# Past this many ranks the table lists the culprits and groups the others by what they do.
MAX_RANK_ROWS = 64
# Lines are not wrapped when not on a terminal; this only bounds rich's layout.
PIPED_WIDTH = 4096


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich exits 1 here; the command knows its exit code (a hang is still 3 under `| head`).
        raise BrokenPipeError


def make_console(out: TextIO, width: int | None = None) -> Console:
    tty = getattr(out, "isatty", lambda: False)()
    plain = bool(os.environ.get("NO_COLOR")) or not tty
    if width is None and not tty:
        # Piped into a file or a CI log: never wrap (a suggested command must copy-paste whole).
        width = PIPED_WIDTH
    return _Console(file=out, width=width, no_color=plain, color_system=None if plain else "auto",
                   highlight=False, soft_wrap=False, emoji=False)


def render_text(report: Report, out: TextIO, width: int | None = None,
                bundles: list[Bundle] | None = None) -> None:
    console = make_console(out, width)
    fold = "fold" if console.is_terminal else "ignore"
    style = "bold red" if report.verdict in ("hang", "crash") else "bold green"
    console.print(Text(f"hangdoc: {esc(headline(report))}", style=style))
    for line in culprit_places(report):
        console.print(Text(f"  {esc(line)}", style="bold"))
    if (line := threshold_line(report)):
        console.print(Text(line))
    if (line := timeout_line(report)):
        console.print(line)
    for line in crash_cause(report, bundles):
        console.print(Text(f"  {esc(line)}", style="bold"), soft_wrap=not console.is_terminal)
    for line in missing_stacks(bundles):
        console.print(Text(f"  {esc(line)}", style="yellow"), soft_wrap=not console.is_terminal)
    for finding in report.findings:
        sev = finding.severity.value
        console.print()
        console.print(Text.assemble((f"{sev.upper():<8} ", _SEVERITY_STYLE.get(sev, "")),
                                    (esc(finding.rule), "bold"), "  ", esc(finding.title)))
        for line in finding.evidence:
            console.print(Text("    " + esc(line)), overflow=fold)
        console.print(Text.assemble(("  fix: ", "bold"), esc(finding.fix)), overflow=fold)
    if report.ranks:
        console.print()
        console.print(ranks_table(report))
    members = class_members(report)
    for bundle in bundles or []:
        tree = stack_tree(bundle, members)
        if tree:
            console.print()
            console.print(Text(stacks_heading(bundle, members), style="bold"))
            for line in tree:
                console.print(Text("  " + esc(line)), overflow=fold)


def spans_nodes(report: Report) -> bool:
    """Ranks of several nodes (a merged bundle): say which node and host each culprit is on."""
    return len({(r.host, r.group_rank) for r in report.ranks}) > 1


def place(rank: RankReport) -> str:
    node = f"node {rank.group_rank}, " if rank.group_rank is not None else ""
    return f"{node}host {rank.host}, pid {rank.pid}"


def culprit_places(report: Report, limit: int = 8) -> list[str]:
    if not report.culprit_ranks or not spans_nodes(report):
        return []
    culprits = set(report.culprit_ranks)
    rows = [r for r in report.ranks if r.rank in culprits]
    lines = [f"rank {r.rank} runs on {place(r)}" for r in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more culprit ranks")
    return lines


def rank_rows(report: Report) -> list[list[RankReport]]:
    """Rows of the ranks table: one rank each, or past MAX_RANK_ROWS, the culprits one by one
    and the other ranks grouped by state, progress and top frame."""
    if len(report.ranks) <= MAX_RANK_ROWS or class_members(report) is not None:
        return [[r] for r in report.ranks]
    culprits = set(report.culprit_ranks)
    groups: dict[tuple, list[RankReport]] = {}
    for r in report.ranks:
        if r.rank not in culprits:
            groups.setdefault((r.state, r.progress, r.top_frame), []).append(r)
    return ([[r] for r in report.ranks if r.rank in culprits]
            + sorted(groups.values(), key=lambda rows: (-len(rows), rows[0].rank or 0)))


def group_cells(rows: list[RankReport]) -> dict[str, str]:
    """The RANK, PID, NODE, HOST and FOR cells of a row that stands for several ranks."""
    nodes = {r.group_rank for r in rows if r.group_rank is not None}
    hosts = {r.host for r in rows}
    if any(r.rank_count > 1 for r in rows):   # a class of a job of many nodes: where its ranks run is not kept
        nodes, hosts = set(), {"-"}
    return {
        "rank": rank_set([x for r in rows for x in row_ranks(r)]).removeprefix("ranks "),
        "pid": "-",
        "node": rank_ranges(nodes) if len(nodes) <= 4 else f"{len(nodes)} nodes",
        "host": next(iter(hosts)) if len(hosts) == 1 else f"{len(hosts)} hosts",
        "for": duration(max(r.waiting_s for r in rows)),
    }


def stacks_heading(bundle: Bundle, members=None) -> str:
    classes = stack_classes(bundle, members)
    ranks = sum(len(c.ranks) for c in classes)
    return (f"Stacks of {ranks} rank{'s' if ranks != 1 else ''} in {len(classes)} "
            f"class{'es' if len(classes) != 1 else ''} "
            "(main threads, outermost frame first; single-branch chains folded):")


def ranks_table(report: Report) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    nodes = spans_nodes(report)
    where = ("NODE", "HOST") if nodes else ()
    for name in ("RANK", "PID", *where, "STATE", "FOR", "PROGRESS", "GPU", "TOP FRAME"):
        table.add_column(name, no_wrap=name != "TOP FRAME", overflow="fold")
    culprits = set(report.culprit_ranks)
    for rows in rank_rows(report):
        rank = rows[0]
        if len(rows) > 1 or rank.rank_count > 1:
            cells = group_cells(rows)
            table.add_row(cells["rank"], cells["pid"], *((cells["node"], esc(cells["host"])) if nodes else ()),
                          esc(rank.state), cells["for"], esc(rank.progress), "-", esc(rank.top_frame or "-"))
            continue
        style = "bold red" if rank.rank in culprits else ""
        node_cells = (rank_label(rank.group_rank), esc(rank.host)) if nodes else ()
        table.add_row(rank_label(rank.rank), str(rank.pid), *node_cells, esc(rank.state), duration(rank.waiting_s),
                      esc(rank.progress), gpu_cell(rank.gpu), esc(rank.top_frame or "-"), style=style)
        for worker in rank.workers:
            index = worker.index if worker.index is not None else "?"
            table.add_row(f"  w{index}", str(worker.pid), *(("", "") if nodes else ()), esc(worker.state), "", "", "",
                          esc(worker.top_frame or "-"), style="dim")
    return table
