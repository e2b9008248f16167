"""What several commands share: the options, printing the report, and saving the bundle."""
from __future__ import annotations

import math
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, TextIO

import typer

from hangdoc.base.defaults import INTERVAL_S, MIN_INTERVAL_S
from hangdoc.base.errors import EXIT_NOT_SAVED, STOP_SIGNALS, BadOutput, HangdocError
from hangdoc.model import Bundle, Engine, NodeDigest, Report
from hangdoc.render.formats import CHECK_FORMATS, OutputFormat, help_of, render_report


def engine_option():
    return typer.Option(Engine.AUTO, "--engine", case_sensitive=False,
                        help="How stacks are read: py-spy (one `py-spy dump` per process, the default) or "
                             "pystack (in-process, about 20x the CPU: the fallback where py-spy does not run). "
                             "auto: py-spy when installed, else pystack.")


HANG_AFTER_HELP = ("Seconds without a step before the verdict is hang. Default: learned, 3x the longest gap "
                   "between samples that saw a rank's loop move (at least 10 s; 60 s until a step has been seen).")


def interval_option(default: float = INTERVAL_S):
    return typer.Option(default, "--interval", min=MIN_INTERVAL_S, callback=seconds(MIN_INTERVAL_S, high=MAX_INTERVAL_S),
                        help="Seconds between samples.")


def hang_after_option(help: str = HANG_AFTER_HELP):
    return typer.Option(None, "--hang-after", min=0.0, callback=seconds(0.0), help=help)


def timeout_option(help: str):
    return typer.Option(None, "--timeout", min=0.0, callback=seconds(0.0), help=help)


REPORT_FORMAT_HELP = help_of()


def report_format_option(help: str = REPORT_FORMAT_HELP):
    return typer.Option(OutputFormat.text, "--format", "-f", case_sensitive=False, metavar="FORMAT", help=help)


def check_format_option():
    def only_check(value):
        if value is not None and OutputFormat(value) not in CHECK_FORMATS:
            raise typer.BadParameter(f"check prints {', '.join(f.value for f in CHECK_FORMATS)}, not {value.value}")
        return value

    return typer.Option(OutputFormat.text, "--format", "-f", case_sensitive=False, callback=only_check, metavar="FORMAT",
                        help=help_of(CHECK_FORMATS).replace("text", "text (rich; plain when not a TTY or NO_COLOR)", 1))


def html_option():
    return typer.Option(None, "--html", help="Also write the report as one self-contained HTML page (every rank's "
                        "timeline) to this file.")


def record_option():
    return typer.Option(None, "--record", metavar="DIR", help="Also write every round the watch reads to DIR "
                        "(made when missing; never over an earlier recording): `hangdoc replay DIR` runs it again to "
                        "the same report. What to send when a verdict looks wrong (it holds what a bundle holds).")


def open_recorder(directory, command: str):
    """The recorder of `--record DIR` (None without it); its header names the command and hangdoc."""
    if directory is None:
        return None
    from hangdoc.bundle.recording import Recorder

    return Recorder.of_command(directory, command)


MAX_INTERVAL_S = 3600.0       # between two samples
MAX_WAIT_S = 1e9              # any other span: the clocks' and sleeps' limits lie beyond it (about 9e9 s)


def seconds(low: float = 0.0, strict: bool = False, high: float = MAX_WAIT_S) -> Callable:
    """A typer callback: a finite number of seconds, at least `low` (above it when `strict`), at most `high`."""

    def check(value):
        if value is None:
            return value
        if not math.isfinite(value) or value < low or (strict and value == low) or value > high:
            bound = f"above {low:g}" if strict else f"at least {low:g}"
            raise typer.BadParameter(f"give a finite number of seconds {bound} and at most {high:g} (got {value:g})")
        return value

    return check


def count(low: int = 1) -> Callable:
    """A typer callback: a whole number, at least `low`."""

    def check(value):
        if value is not None and value < low:
            raise typer.BadParameter(f"{value} is below {low}")
        return value

    return check


def quiet_broken_pipe() -> None:
    """The reader went away (`| head`): stop writing, keep the verdict's exit code."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def emit_report(report: Report, fmt: OutputFormat, out: TextIO | None = None) -> bool:
    """The report on `out` (stdout when None); False, said in one line, when stdout cannot take it."""
    from hangdoc.base.outputs import stdout_lost, stdout_stream

    try:
        render_report(report, fmt, out or stdout_stream())
    except BrokenPipeError:
        quiet_broken_pipe()
    except OSError as exc:       # a full device, stdout closed: one line; watch and run still save
        if out is not None:
            raise
        print(f"hangdoc: error: {stdout_lost(exc)}", file=sys.stderr)
        return False
    return True


def html_target(path: Path | None) -> Path | None:
    """--html checked before the watch starts, not after it."""
    if path is None:
        return None
    from hangdoc.bundle.files import check_writable

    return check_writable(path, "--html")


def distinct_outputs(**named: Path | str | None) -> None:
    """Refuse, before anything starts, two outputs named as one file (`--out X --junit X`, the step
    summary at the bundle's path): the second would overwrite or corrupt the first. Names are
    the options' (`junit` for --junit) or an environment variable's (`GITHUB_STEP_SUMMARY`)."""
    seen: dict[tuple, str] = {}
    for option, path in named.items():
        if not path:
            continue
        where = Path(path)
        try:
            stat = where.stat()
            key: tuple = ("inode", stat.st_dev, stat.st_ino)
        except OSError:
            try:
                key = ("path", os.path.realpath(where))
            except OSError:     # the working directory itself is gone: the names as given
                key = ("path", str(where))
        shown = option if option.isupper() else "--" + option.replace("_", "-")
        if key in seen:
            raise HangdocError(f"{seen[key]} and {shown} name one file ({path}): give each output a path of its own")
        seen[key] = shown


def write_html(report: Report, path: Path | None) -> None:
    """--html: the page beside the usual output; a failure to write it is one line, not the verdict's exit code."""
    if path is None:
        return
    from hangdoc.base.outputs import output_file

    try:
        with output_file(path, "--html") as out:
            render_report(report, OutputFormat.html, out)
    except BadOutput as exc:
        print(f"hangdoc: error: the HTML report was not written: {exc}", file=sys.stderr)
        return
    except OSError as exc:
        print(f"hangdoc: error: the HTML report was not written to {path}: {exc.strerror or exc}", file=sys.stderr)
        return
    print(f"hangdoc: HTML report written to {path}", file=sys.stderr)


def default_out() -> Path:
    """The bundle's name when no --out is given: in the current directory, or where no file can be
    made there (a read-only checkout, another user's directory) in the system's temporary
    directory, said in one line. An --out the user gives is theirs: its failure stays an error."""
    import tempfile

    from hangdoc.base.outputs import unwritable

    name = f"hangdoc-{time.strftime('%Y%m%d-%H%M%S')}.json.zst"
    why = unwritable(Path("."))
    if why is None:
        return Path(name)
    out = Path(tempfile.gettempdir()) / name
    print(f"hangdoc: the current directory cannot be written ({why}); the bundle will be saved to {out}",
          file=sys.stderr)
    return out


def save_or_say(bundle: Bundle, out: Path, digest: NodeDigest | None) -> bool:
    """Save the bundle; a failure (disk full, the place gone) is one line, after the report."""
    from hangdoc.bundle.files import save_bundle

    try:
        save_bundle(bundle, out, digest)
    except HangdocError as exc:
        print(f"hangdoc: error: the bundle was not saved: {exc}", file=sys.stderr)
        return False
    except OSError as exc:
        print(f"hangdoc: error: the bundle was not saved to {out}: {exc.strerror or exc} "
              "(free some space or pass --out to a writable place next time)", file=sys.stderr)
        return False
    print(f"hangdoc: bundle saved to {out} (replay: hangdoc report {out})", file=sys.stderr)
    return True


def delivered(code: int, saved: bool, came: list[int], saved_words: str = "") -> int:
    """The exit code once the report is out: the judgement's, unless the bundle could not be saved
    (EXIT_NOT_SAVED) or a Ctrl-C / SIGTERM came while it was printed (its own EXIT_SIGINT / EXIT_SIGTERM)."""
    if not saved:
        return EXIT_NOT_SAVED
    if came:
        print(f"hangdoc: stopped by a signal once the report was out{saved_words}", file=sys.stderr)
        return came[-1]
    return code


@contextmanager
def signals_held():
    """Ctrl-C, SIGTERM and SIGHUP wait while the report is printed and the bundle saved: the list
    yielded holds the exit code (EXIT_SIGINT / EXIT_SIGTERM) of each that came meanwhile, for the
    caller to leave with."""
    came: list[int] = []

    def hold(number: int, _frame) -> None:
        if number == signal.SIGHUP:
            from hangdoc.base.outputs import detach_terminal

            detach_terminal()
        came.append(STOP_SIGNALS[number])
    try:
        old = {number: signal.signal(number, hold) for number in STOP_SIGNALS}
    except ValueError:            # not the main thread: nothing to hold
        old = {}
    try:
        yield came
    finally:
        for number, handler in old.items():
            signal.signal(number, handler)

