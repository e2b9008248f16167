"""`hangdoc report`, `hangdoc rules`, `hangdoc explain`: the diagnosis offline, and the rules' pages."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from hangdoc.cli import app
from hangdoc.cli.common import (
    emit_report, hang_after_option, quiet_broken_pipe, report_format_option,
)
from hangdoc.base.errors import EXIT_OK, EXIT_USAGE, BadOutput, HangdocError
from hangdoc.render.formats import OutputFormat



@app.command()
def report(
    bundles: List[Path] = typer.Argument(..., help="Bundle files (or a directory of them) of one job, and/or "
                                         "its ranks' Flight Recorder dumps (files or directories)."),
    fmt: OutputFormat = report_format_option(),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to this file instead of stdout."),
    hang_after: Optional[float] = hang_after_option("Override the threshold the bundle was taken with."),
) -> None:
    """Diagnose saved bundles offline: the same report the live watch printed.

    PyTorch Flight Recorder dumps (`<prefix><rank>`, pickle or JSON) given beside the bundles join
    their evidence; given alone, they are judged on their own (docs/flight-recorder.md).

    Exits like watch: 3 when the bundle shows a hang, 4 a crash, 0 otherwise; 2 for a
    missing, corrupt, truncated or newer-schema bundle, or dumps none of which can be read.
    """
    from hangdoc.base.outputs import check_output, output_file
    from hangdoc.inputs.evidence import report_inputs

    if output is not None:
        from hangdoc.cli.common import distinct_outputs

        for bundle_path in bundles:
            distinct_outputs(BUNDLE=bundle_path, output=output)
        check_output(output, "-o")      # a device, FIFO or link is refused before the diagnosis

    bundle, judgement = report_inputs(bundles, hang_after)
    rep = judgement.report
    from hangdoc.render.escape import terminal

    for line in bundle.flight_errors:
        print(f"hangdoc: {terminal(line)}", file=sys.stderr)
    for line in bundle.set_aside:
        print(f"hangdoc: warning: {terminal(line)}", file=sys.stderr)
    if output is not None:
        try:
            with output_file(output, "-o") as out:
                emit_report(rep, fmt, out)
        except OSError as exc:
            raise BadOutput(f"cannot write {output}: {exc.strerror}") from None
    elif not emit_report(rep, fmt):
        raise typer.Exit(EXIT_USAGE)
    raise typer.Exit(judgement.exit_code)


@app.command()
def rules() -> None:
    """List every slug hangdoc can print: severity, the commands that raise it, and its title."""
    from hangdoc.registry import records

    try:
        for rule in records().values():
            print(f"{rule.slug:<28} {rule.severity.value:<9} {','.join(rule.commands):<22} {rule.title}")
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_broken_pipe()
    print("hangdoc: `hangdoc explain SLUG` prints any slug's page", file=sys.stderr)
    raise typer.Exit(EXIT_OK)


@app.command()
def explain(slug: str = typer.Argument(..., help="A slug that `hangdoc rules`, `check`, `run` or a report prints.")) -> None:
    """Print the documentation page of a rule or of any finding's slug."""
    from hangdoc.registry import page, topics

    text = page(slug)
    if text is None:
        from hangdoc.render.escape import terminal

        shown = terminal(slug if len(slug) <= 64 else slug[:64] + "...")
        raise HangdocError(f"no rule or finding named {shown!r}; the slugs are: {', '.join(topics())}")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_broken_pipe()
    raise typer.Exit(EXIT_OK)
