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



def _version(value: bool) -> None:
    if value:
        from hangdoc import __version__

        print(f"hangdoc {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Attach to a hung torchrun / DDP job and name the culprit rank and the root cause.

    Exit codes: 0 healthy or nothing found, 1 `check` found problems, 2 usage, attach or
    input error, 3 hang detected, 4 the job crashed.
    """


# Each module registers its command(s) on `app` when imported.
from hangdoc.cli import demo, report, run, watch  # noqa: E402,F401
from hangdoc.cli import check  # noqa: E402,F401
from hangdoc.cli import ps  # noqa: E402,F401


def main(argv: list[str] | None = None) -> int:
    try:
        rc = app(args=argv, prog_name="hangdoc", standalone_mode=False)
        return rc if isinstance(rc, int) else 0
    except HangdocError as exc:
        print(f"hangdoc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        print("hangdoc: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        # click's usage errors (vendored inside newer typer releases): they know how to show themselves.
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            return EXIT_USAGE
        if type(exc).__name__ == "Abort":
            return 130
        raise
    return 0
