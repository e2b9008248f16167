"""`hangdoc report`, `hangdoc rules`, `hangdoc explain`: the diagnosis offline, and the rules' pages."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from hangdoc.cli import app
from hangdoc.cli.common import Format, emit_report, quiet_broken_pipe, seconds, verdict_exit_code
from hangdoc.errors import EXIT_OK, BadOutput, HangdocError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules"


@app.command()
def report(
    bundles: List[Path] = typer.Argument(..., help="Bundle files (or a directory of them) of one job, and/or "
                                         "its ranks' Flight Recorder dumps (files or directories)."),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="text, markdown (for a GitHub issue) or json."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to this file instead of stdout."),
    hang_after: Optional[float] = typer.Option(None, "--hang-after", callback=seconds(0.0), help="Override the threshold the bundle was taken with."),
) -> None:
    """Diagnose saved bundles offline: the same report the live watch printed.

    PyTorch Flight Recorder dumps (`<prefix><rank>`, pickle or JSON) given beside the bundles join
    their evidence; given alone, they are judged on their own (docs/flight-recorder.md).

    Exits like watch: 3 when the bundle shows a hang, 4 a crash, 0 otherwise; 2 for a
    missing, corrupt, truncated or newer-schema bundle, or dumps none of which can be read.
    """
    from hangdoc.pipeline import report_inputs

    bundle, rep = report_inputs(bundles, hang_after)
    for line in bundle.flight_errors:
        print(f"hangdoc: {line}", file=sys.stderr)
    if output is not None:
        try:
            with open(output, "w") as out:
                emit_report(rep, fmt, [bundle], out)
        except OSError as exc:
            raise BadOutput(f"cannot write {output}: {exc.strerror}") from None
    else:
        emit_report(rep, fmt, [bundle])
    raise typer.Exit(verdict_exit_code(rep.verdict))


@app.command()
def rules() -> None:
    """List the rules: slug, severity and what each one looks for."""
    from hangdoc.rules import all_rules

    try:
        for rule in all_rules():
            print(f"{rule.slug:<24} {rule.severity.value:<9} {rule.title}")
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_broken_pipe()
    print("hangdoc: severities are those of a live job; `hangdoc check` raises some of these slugs, and its own, "
          "at the severities docs/check.md lists (a risk before the run, not a hang); `hangdoc explain SLUG` "
          "explains any of them", file=sys.stderr)
    raise typer.Exit(EXIT_OK)


@app.command()
def explain(slug: str = typer.Argument(..., help="A slug that `hangdoc rules`, `check`, `run` or a report prints.")) -> None:
    """Print the documentation page of a rule or of any finding's slug."""
    from hangdoc.advice import ADVICE
    from hangdoc.rules import get_rule

    rule = get_rule(slug)
    page = DOCS / f"{slug}.md"
    if page.is_file() and page.resolve().parent == DOCS:
        text = page.read_text()
    elif rule is not None:
        text = f"# {rule.slug}\n\n{rule.title}\n\n{rule.summary}\n"
    elif slug in ADVICE:
        advice = ADVICE[slug]
        text = f"# {slug}\n\n{advice.title}\n\nFix: {advice.fix}\n"
        if advice.snippet:
            text += f"\n```python\n{advice.snippet}\n```\n"
        text += "\nSee docs/check.md for when `hangdoc check` raises it.\n"
    else:
        raise HangdocError(f"no rule or finding named {slug!r}; the slugs are: {', '.join(known_slugs())}")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_broken_pipe()
    raise typer.Exit(EXIT_OK)


def known_slugs() -> list[str]:
    """Every slug `explain` knows: the rules, `check`'s findings, and the pages in docs/rules/."""
    from hangdoc.advice import ADVICE
    from hangdoc.rules import all_rules

    pages = [p.stem for p in DOCS.glob("*.md")] if DOCS.is_dir() else []
    return sorted(set([r.slug for r in all_rules()] + list(ADVICE) + pages))
