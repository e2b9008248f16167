"""Lay a Report out: what the user reads, in which order, phrased once.

Pure: it decides which lines and rows the reader sees and how they are worded, never how
they are drawn. Text (rich), Markdown and JUnit draw the same layout; the JSON document is
the Report itself. `hangdoc check` lays out its results the same way (`check/sections.py`).
"""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.model import Finding, RankReport, Report, StackClass
from hangdoc.render.words import (before_line, gpu_cell, headline, progress_word, proof_line, rank_source_line,
                                  shares_line, threshold_line, timeout_line, witnesses_line, wrapper_line)
from hangdoc.base.words import duration, rank_label, rank_ranges, rank_set

# Past this many ranks the table lists the culprits and groups the others by what they do.
MAX_RANK_ROWS = 64


@dataclass(frozen=True)
class Row:
    """One line of the ranks table: a rank, a class of ranks, or a rank's DataLoader worker."""

    rank: str
    pid: str
    node: str
    host: str
    state: str
    waiting: str
    progress: str
    gpu: str
    top_frame: str
    culprit: bool = False
    worker: bool = False
    group: bool = False        # stands for several ranks


@dataclass(frozen=True)
class Stacks:
    """One bundle's main-thread stacks: a heading, the folded prefix tree, the classes."""

    heading: str
    tree: tuple[str, ...]
    classes: tuple[StackClass, ...]


@dataclass(frozen=True)
class ReportLayout:
    alarm: bool                    # hang or crash: drawn as a failure
    headline: str
    places: tuple[str, ...]        # where each culprit runs, in a job of several nodes
    notes: tuple[str, ...]         # how hang was told from slow; the time left before the PG timeout
    cause: tuple[str, ...]         # a crash's exception, quoted from the job's output
    missing: tuple[str, ...]       # ranks without a stack, and why
    findings: tuple[Finding, ...]
    spans_nodes: bool              # the ranks run on several nodes: rows say which
    rows: tuple[Row, ...]
    stacks: tuple[Stacks, ...]


def layout(report: Report) -> ReportLayout:
    stacks = []
    if report.stack_classes or report.stack_tree:
        stacks.append(Stacks(stacks_heading(report.stack_classes), report.stack_tree, report.stack_classes))
    return ReportLayout(
        alarm=report.failed,
        headline=headline(report),
        places=tuple(culprit_places(report)),
        notes=tuple(line for line in (proof_line(report), threshold_line(report), witnesses_line(report), shares_line(report),
                                      before_line(report),
                                      timeout_line(report), rank_source_line(report),
                                      wrapper_line(report)) if line),
        cause=report.cause,
        missing=report.missing_stacks,
        findings=report.findings,
        spans_nodes=spans_nodes(report),
        rows=tuple(_rows(report)),
        stacks=tuple(stacks),
    )


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
    """The ranks table's rows: one rank each, or past MAX_RANK_ROWS, the culprits one by one and
    the other ranks grouped by state, progress and top frame (a report by class is grouped already)."""
    if len(report.ranks) <= MAX_RANK_ROWS or report.class_members is not None:
        return [[r] for r in report.ranks]
    culprits = set(report.culprit_ranks)
    groups: dict[tuple, list[RankReport]] = {}
    for r in report.ranks:
        if r.rank not in culprits:
            groups.setdefault((r.state, r.progress, r.top_frame), []).append(r)
    return ([[r] for r in report.ranks if r.rank in culprits]
            + sorted(groups.values(), key=lambda rows: (-len(rows), rows[0].rank or 0)))


def _rows(report: Report) -> list[Row]:
    culprits = set(report.culprit_ranks)
    out = []
    for group in rank_rows(report):
        first = group[0]
        if len(group) > 1 or first.rank_count > 1:
            out.append(_group_row(group))
            continue
        out.append(Row(rank_label(first.rank), str(first.pid), rank_label(first.group_rank), first.host, first.state,
                       duration(first.waiting_s), progress_word(first), gpu_cell(first.gpu), first.top_frame or "-",
                       culprit=first.rank in culprits))
        for worker in first.workers:
            index = worker.index if worker.index is not None else "?"
            out.append(Row(f"w{index}", str(worker.pid), "", "", worker.state, "", "", "", worker.top_frame or "-",
                           worker=True))
    return out


def _group_row(rows: list[RankReport]) -> Row:
    """A row that stands for several ranks: their rank set, their nodes and hosts, the longest wait."""
    nodes = {r.group_rank for r in rows if r.group_rank is not None}
    hosts = {r.host for r in rows}
    if any(r.rank_count > 1 for r in rows):   # a class of a job of many nodes: where its ranks run is not kept
        nodes, hosts = set(), {"-"}
    first = rows[0]
    return Row(
        rank=rank_set([x for r in rows for x in r.members]).removeprefix("ranks "),
        pid="-",
        node=rank_ranges(nodes) if len(nodes) <= 4 else f"{len(nodes)} nodes",
        host=next(iter(hosts)) if len(hosts) == 1 else f"{len(hosts)} hosts",
        state=first.state, waiting=duration(max(r.waiting_s for r in rows)), progress=progress_word(first), gpu="-",
        top_frame=first.top_frame or "-", group=True,
    )


def stacks_heading(classes: tuple[StackClass, ...]) -> str:
    ranks = sum(len(c.ranks) for c in classes)
    return (f"Stacks of {ranks} rank{'s' if ranks != 1 else ''} in {len(classes)} "
            f"class{'es' if len(classes) != 1 else ''} "
            "(main threads, outermost frame first; single-branch chains folded):")
