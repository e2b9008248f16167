"""`hangdoc replay DIR`: a watch recorded with `--record DIR`, run again round by round."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from hangdoc.cli import app
from hangdoc.cli.common import emit_report, hang_after_option, report_format_option
from hangdoc.base.errors import EXIT_USAGE
from hangdoc.render.formats import OutputFormat


@app.command()
def replay(
    recording: Path = typer.Argument(..., metavar="DIR", help="A directory `watch --record DIR` or "
                                     "`run --record DIR` wrote (or its recording.zst)."),
    fmt: OutputFormat = report_format_option(),
    hang_after: Optional[float] = hang_after_option("Replay with this threshold instead of the live watch's "
                                                    "(the rounds are the same; the verdict may come at another)."),
) -> None:
    """Run a recorded watch again: the same rounds through the same step, the same report.

    With the code that recorded it, the report, the verdict and the round it came at are the live
    watch's, byte for byte; with another version, its verdict on the rounds the live watch saw.
    One line on stderr says at which round the verdict came and where the live watch stopped.
    Exits like report: 3 a hang, 4 a crash, 0 otherwise; 2 for what is not a recording.
    """
    from hangdoc.live.replay import UNSET, replay as replay_recording
    from hangdoc.render.escape import terminal

    replayed = replay_recording(recording, UNSET if hang_after is None else hang_after)
    print(f"hangdoc: {terminal(replayed.summary())}", file=sys.stderr)
    if not emit_report(replayed.report, fmt):
        raise typer.Exit(EXIT_USAGE)
    raise typer.Exit(replayed.exit_code)
