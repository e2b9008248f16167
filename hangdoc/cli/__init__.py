"""The `hangdoc` command line: one small module per command, all thin.

A command parses, validates, calls the pipeline, renders and maps the result to an
exit code. Every HangdocError becomes one line on stderr and its exit code.
"""
from __future__ import annotations

import signal
import sys

import typer

from hangdoc.errors import EXIT_OK, EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE, HangdocError, Interrupted

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
    input error, 3 hang detected, 4 the job crashed, 5 the job ended and the cause is unknown,
    6 report printed but the bundle could not be saved, 7 suspect (ranks split, not seen long
    enough to tell a hang from a slow step), 130 / 143 stopped by Ctrl-C / SIGTERM
    (docs/exit-codes.md).
    """


# Each module registers its command(s) on `app` when imported.
from hangdoc.cli import demo, report, run, watch  # noqa: E402,F401
from hangdoc.cli import check  # noqa: E402,F401
from hangdoc.cli import ps  # noqa: E402,F401


def _on_sigterm(signum, frame) -> None:
    raise Interrupted(EXIT_SIGTERM)


def usage_line(exc) -> str:
    """click's usage error as one line: what is wrong and where the help is."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see `{ctx.command_path} --help`)" if ctx is not None else " (see `hangdoc --help`)"
    message = " ".join(exc.format_message().split())
    return f"hangdoc: error: {message}{where}"


def main(argv: list[str] | None = None) -> int:
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:   # not the main thread (tests calling main() from a worker thread)
        pass
    try:
        rc = app(args=argv, prog_name="hangdoc", standalone_mode=False)
        return rc if isinstance(rc, int) else 0
    except HangdocError as exc:
        from hangdoc.render.escape import terminal

        print(f"hangdoc: error: {terminal(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except Interrupted as exc:
        print("hangdoc: interrupted", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hangdoc: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except BrokenPipeError:
        from hangdoc.cli.common import quiet_broken_pipe

        quiet_broken_pipe()
        return EXIT_OK
    except Exception as exc:
        # click's usage errors (vendored inside newer typer releases): one line, as documented.
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            print(usage_line(exc), file=sys.stderr)
            return EXIT_USAGE
        if type(exc).__name__ == "Abort":
            return EXIT_SIGINT
        raise
