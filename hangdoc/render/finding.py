"""One Finding drawn as text (on a rich console) or as Markdown lines: the report's findings and
`hangdoc check`'s both go through here.

The two looked different before they shared this code, and both are pinned byte for byte (the
golden reports, the check tests), so what differs is a `Look`'s fields, not a second copy.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich.console import Console, OverflowMethod
from rich.text import Text

from hangdoc.base.words import rank_ranges
from hangdoc.model import Finding, Severity
from hangdoc.render.escape import md_code, md_text
from hangdoc.render.escape import terminal as esc

# Evidence lines `check` shows in text and Markdown; every line stays in --format json.
MAX_EVIDENCE_LINES = 20


@dataclass(frozen=True)
class Look:
    """How a command draws its findings.

    `heading`: a heading line with the ranks and the title under it, the whole heading in the
    severity's colour (check); else one line, severity, slug and title, only the severity word in
    colour (the report). In Markdown the heading is a `###` section saying "rank 3" / "ranks 0-3";
    the one-line form names them the same way, in brackets, and trims its evidence lines.
    """

    heading: bool
    severity_styles: Mapping[Severity, str]
    bullet: str                      # what leads an evidence line in text
    evidence_style: str
    fix_label_style: str             # of "fix:"
    fix_style: str                   # of the whole fix line, and of the code under it
    max_evidence: int | None = None  # evidence lines drawn; the rest are counted in one more line


REPORT = Look(heading=False,
              severity_styles={Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"},
              bullet="    ", evidence_style="", fix_label_style="bold", fix_style="")
CHECK = Look(heading=True,
             severity_styles={Severity.CRITICAL: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "cyan"},
             bullet="  - ", evidence_style="dim", fix_label_style="", fix_style="green",
             max_evidence=MAX_EVIDENCE_LINES)


def draw_finding(console: Console, f: Finding, look: Look = REPORT, snippet: str | None = None,
                 overflow: OverflowMethod | None = None) -> None:
    """A blank line, then `f`; `snippet` (code the fix shows) under the fix, `overflow` for the long lines."""
    console.print()
    severity = (f"{f.severity.value.upper():<8} ", look.severity_styles.get(f.severity, ""))
    if look.heading:
        ranks = f"  {shown_ranks(f.ranks)}" if f.ranks else ""
        console.print(Text.assemble(severity[0], (esc(f.rule), "bold"), ranks, style=severity[1]))
        console.print(Text(f"  {esc(f.title)}"))
    else:
        console.print(Text.assemble(severity, (esc(f.rule), "bold"), "  ", esc(f.title)))
    for line in shown_evidence(f, look.max_evidence):
        console.print(Text(look.bullet + esc(line), style=look.evidence_style), overflow=overflow)
    console.print(Text.assemble(("  fix: ", look.fix_label_style), esc(f.fix), style=look.fix_style),
                  overflow=overflow)
    for line in (snippet or "").splitlines():
        console.print(Text(f"      {line}", style=look.fix_style))


def finding_markdown(f: Finding, look: Look = REPORT, snippet: str | None = None) -> list[str]:
    """`f` as Markdown lines, without a blank line around it (the caller spaces its findings)."""
    if look.heading:
        ranks = f" ({shown_ranks(f.ranks)})" if f.ranks else ""
        lines = [f"### {f.severity.value.upper()} `{md_code(f.rule)}`{ranks}", "", md_text(f.title)]
        evidence = [f"- {md_text(e)}" for e in shown_evidence(f, look.max_evidence)]
    else:
        ranks = f" ({shown_ranks(f.ranks)})" if f.ranks else ""
        lines = [f"**{f.severity.value}** `{md_code(f.rule)}`{ranks}: {md_text(f.title)}"]
        evidence = [f"- {md_text(e).strip()}" for e in shown_evidence(f, look.max_evidence)]
    lines += ["", *evidence, "", f"**Fix:** {md_text(f.fix)}"]
    if snippet:
        lines += ["", "```", snippet, "```"]
    return lines


def shown_evidence(f: Finding, limit: int | None = None) -> list[str]:
    """A finding's evidence bounded for reading: a 100,000-line list must not print 16,500 lines."""
    lines = list(f.evidence)
    if limit is None or len(lines) <= limit:
        return lines
    return lines[:limit] + [f"... and {len(lines) - limit:,} more (all of them: --format json)"]


def shown_ranks(ranks: tuple[int, ...]) -> str:
    """"rank 3" or "ranks 0-7, 9": ranges, not one number per rank."""
    return f"rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)}"
