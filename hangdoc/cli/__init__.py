"""The `hangdoc` command line: one small module per command, all thin.

A command parses, validates, calls the pipeline, renders and maps the result to an
exit code. Every HangdocError becomes one line on stderr and its exit code.
"""
from __future__ import annotations

import inspect
import signal
import sys

import typer

from hangdoc.base.errors import EXIT_OK, EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE, STOP_SIGNALS, HangdocError, Interrupted

# click's exception classes, reached through typer's public BadParameter: typer vendors click
# privately, so these are the classes its parser raises, whichever click it carries.
CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
CLICK_ABORT = typer.Abort

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
    enough to tell a hang from a slow step), 8 slow (a straggler or its data costs every
    step; `run` only with --fail-on slow), 130 / 143 stopped by Ctrl-C / SIGTERM
    (docs/exit-codes.md).
    """


# Each module registers its command(s) on `app` when imported; `main` imports only the one
# the command line names (importing them all costs ~0.5 s of CPU before any work starts).
# The others stand in `--help` as placeholders with their one-line help (a unit test keeps
# these lines equal to the commands' own).
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("hangdoc.cli.demo", "Run a scenario under watch (threshold learned, or --hang-after), show the live view and the report."),
    "report": ("hangdoc.cli.report", "Diagnose saved bundles offline: the same report the live watch printed."),
    "rules": ("hangdoc.cli.report", "List every slug hangdoc can print: severity, the commands that raise it, and its title."),
    "explain": ("hangdoc.cli.report", "Print the documentation page of a rule or of any finding's slug."),
    "watch": ("hangdoc.cli.watch", "Attach to a running torchrun / DDP job (any of its pids, or --job: the one on this "
                                   "node) and diagnose it."),
    "run": ("hangdoc.cli.run", "Run a short training under watch: exit 3 on a hang, 4 on a crash, else the command's own code."),
    "replay": ("hangdoc.cli.replay", "Run a recorded watch again: the same rounds through the same step, the same report."),
    "ps": ("hangdoc.cli.ps", "List the torchrun / DDP jobs on this node: run id, master, world size, node, launcher, ranks."),
    "check": ("hangdoc.cli.check", "Preflight: find tomorrow's hang in the data, the host or the checkpoint."),
}


def load_commands(argv: list[str]) -> None:
    """Import the module of the command `argv` names (the first word that is not an option)."""
    import importlib

    name = next((a for a in argv if not a.startswith("-")), None)
    if name in COMMANDS:
        importlib.import_module(COMMANDS[name][0])


def _registered() -> set[str]:
    names = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}
    return names | {g.name for g in app.registered_groups if g.name}


def _placeholder() -> None:   # never runs: a named command's module is always imported first
    raise HangdocError("internal error: a command was not loaded")


def with_placeholders() -> list:
    """Add a placeholder for every command not imported, in the order of COMMANDS;
    returns what to restore `app.registered_commands` to afterwards."""
    from typer.models import CommandInfo

    saved = list(app.registered_commands)
    loaded = _registered()
    real = {c.name or c.callback.__name__: c for c in saved if c.callback}
    ordered = []
    for name, (_, short) in COMMANDS.items():
        if name in real:
            ordered.append(real.pop(name))
        elif name not in loaded:
            ordered.append(CommandInfo(name=name, callback=_placeholder, help=short))
    app.registered_commands[:] = ordered + [c for c in saved if c not in ordered]
    return saved


_TERMINATED: list[int] = []     # SIGTERM or SIGHUP came: typer answers an uncaught one with a bare 130


def _on_sigterm(signum, frame) -> None:
    if signum == signal.SIGHUP:
        from hangdoc.base.outputs import detach_terminal

        detach_terminal()
    _TERMINATED.append(STOP_SIGNALS[signum])
    raise Interrupted(STOP_SIGNALS[signum])


def usage_line(exc) -> str:
    """click's usage error as one line: what is wrong and where the help is."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see `{ctx.command_path} --help`)" if ctx is not None else " (see `hangdoc --help`)"
    message = " ".join(exc.format_message().split())
    return f"hangdoc: error: {message}{where}"


def reflowed(doc: str) -> str:
    """A docstring as `--help` should wrap it: each paragraph one line, which rich wraps at the
    terminal's width (typer keeps a docstring's own line breaks: at 80 columns a sentence broke
    twice). A line that starts indented or with "-" stays a line of its own."""
    lines = inspect.cleandoc(doc).split("\n")
    out: list[str] = []
    for line in lines:
        if out and out[-1] and line and not line.startswith((" ", "-", "*")):
            out[-1] += " " + line
        else:
            out.append(line)
    return "\n".join(out)


def reflow_help(typer_app: typer.Typer) -> None:
    """Give every command of `typer_app` (and of its groups) its docstring reflowed as its help."""
    infos = [*typer_app.registered_commands, typer_app.registered_callback]
    for info in filter(None, infos):
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if doc:
            info.help = reflowed(doc)
    for group in typer_app.registered_groups:
        reflow_help(group.typer_instance)


def main(argv: list[str] | None = None) -> int:
    _TERMINATED.clear()
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:     # under nohup it stays ignored
            signal.signal(signal.SIGHUP, _on_sigterm)
    except ValueError:   # not the main thread (tests calling main() from a worker thread)
        pass
    args = sys.argv[1:] if argv is None else list(argv)
    saved = None
    try:
        load_commands(args)
        saved = with_placeholders()
        reflow_help(app)
        rc = app(args=args, prog_name="hangdoc", standalone_mode=False)
        if rc == EXIT_SIGINT and _TERMINATED:     # a command that did not catch it (report): 143, said
            print("hangdoc: interrupted", file=sys.stderr)
            return _TERMINATED[-1]
        return rc if isinstance(rc, int) else 0
    except HangdocError as exc:
        from hangdoc.render.escape import terminal

        # Line by line: a message that lists (jobs, ranks) keeps its lines, each made safe.
        print("hangdoc: error: " + "\n".join(terminal(line) for line in str(exc).split("\n")), file=sys.stderr)
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
    except CLICK_ERROR as exc:
        # click's usage errors (bad option, bad value, missing argument): one line, as documented.
        print(usage_line(exc), file=sys.stderr)
        return EXIT_USAGE
    except CLICK_ABORT:
        return EXIT_SIGINT
    finally:
        if saved is not None:
            app.registered_commands[:] = saved
