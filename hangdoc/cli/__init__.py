"""The `hangdoc` command line: one small module per command, all thin.

A command parses, validates, calls the pipeline, renders and maps the result to an
exit code. Every HangdocError becomes one line on stderr and its exit code.
"""
from __future__ import annotations

import sys

import typer

from hangdoc.errors import EXIT_USAGE, HangdocError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Attach to a hung torchrun / DDP job and name the culprit rank and the root cause.",
    pretty_exceptions_enable=False,
)

# Each module registers its command(s) on `app` when imported.
from hangdoc.cli import watch  # noqa: E402,F401


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, prog_name="hangdoc", standalone_mode=False)
    except HangdocError as exc:
        print(f"hangdoc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        print("hangdoc: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # click's usage errors and aborts
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return EXIT_USAGE
        if isinstance(exc, click.exceptions.Abort):
            return 130
        raise
    return 0
