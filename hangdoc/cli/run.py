"""`hangdoc run -- CMD`: the CI smoke check. Fails with a report on a hang or a crash."""
from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from hangdoc.base.errors import HangdocError
from hangdoc.bundle.files import check_writable
from hangdoc.cli import app
from hangdoc.cli.common import (
    Engine, default_out, delivered, distinct_outputs, emit_report, engine_option, hang_after_option, html_option,
    html_target, interval_option, open_recorder, record_option, report_format_option, save_or_say, signals_held,
    timeout_option, write_html,
)
from hangdoc.render.formats import OutputFormat


class FailOn(str, Enum):
    hang = "hang"
    slow = "slow"


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    cmd: List[str] = typer.Argument(..., help="The command to run, after --: e.g. -- torchrun ... train.py --max-steps 20"),
    timeout: Optional[float] = timeout_option("Fail (exit 3) if the whole run takes longer."),
    hang_after: Optional[float] = hang_after_option(),
    interval: float = interval_option(),
    fmt: OutputFormat = report_format_option(),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Save the bundle here, whatever the end "
                                       "(without it: on a hang, a crash or a slow run, in the current directory)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML result here."),
    html: Optional[Path] = html_option(),
    no_live: bool = typer.Option(True, "--no-live/--live", help="A live table instead of status lines (TTY only)."),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="Do not sample GPUs through NVML."),
    py_spy: Optional[str] = typer.Option(None, "--py-spy", help="Path of the py-spy binary to use."),
    engine: Engine = engine_option(),
    fail_on: FailOn = typer.Option(FailOn.hang, "--fail-on", case_sensitive=False,
                                   help="hang: fail on a hang or a crash (default); slow: also on a slow run "
                                        "(a straggler or data-bound job), exit 8. A slow run is otherwise a warning."),
    record: Optional[Path] = record_option(),
) -> None:
    """Run a short training under watch: exit 3 on a hang, 4 on a crash, else the command's own code.

    Ctrl-C / SIGTERM (or SIGHUP) end the job, print the report so far, save the bundle and the JUnit result
    and exit 130 / 143.

    The command's output streams through (to stderr with --format json, html or trace, so stdout
    holds only the report). With GITHUB_STEP_SUMMARY set, the Markdown report is appended to it.
    """
    from hangdoc.live.options import WatchOptions
    from hangdoc.live.probes import make_probes
    from hangdoc.live.runner import run_command, saveable
    from hangdoc.render.live import LiveView

    if not cmd:
        raise HangdocError("nothing to run: give the command after --, e.g. hangdoc run -- torchrun ... train.py")
    named = out is not None          # a bundle named is always written (or why not said)
    distinct_outputs(out=out, junit=junit, html=html, record=record,
                     GITHUB_STEP_SUMMARY=os.environ.get("GITHUB_STEP_SUMMARY"))
    out = check_writable(out or default_out())
    if junit is not None:
        check_writable(junit, "--junit")
    html = html_target(html)
    options = WatchOptions(interval_s=interval, hang_after_s=hang_after, timeout_s=timeout, engine=engine,
                           py_spy=py_spy, gpu=not no_gpu)
    probes = make_probes(options)
    sink = sys.stderr if fmt.document else sys.stdout
    view = LiveView(sys.stderr, live=not no_live, every=5)
    recorder = open_recorder(record, "run")
    try:
        result = run_command(list(cmd), options, probes, sink, on_sample=view.update,
                             fail_on_slow=fail_on is FailOn.slow, recorder=recorder)
    finally:
        view.close()
        if recorder is not None:
            recorder.close()
    outcome = result.outcome
    stopped = result.interrupted is not None
    failed = outcome.judgement.failed
    slow = outcome.report.slow is not None and not failed
    outlived = any(f.rule == "outlived-job" for f in outcome.report.findings)
    with signals_held() as came:      # a Ctrl-C or SIGTERM now must not cut the report or the save short
        if stopped:
            print(f"hangdoc: interrupted; the job was ended; the report of the {outcome.report.samples} samples so far:",
                  file=sys.stderr)
        if failed or slow or stopped or outlived or fmt is not OutputFormat.text:
            emit_report(outcome.report, fmt)
        else:
            print(f"hangdoc: the run finished (exit code {result.job_exit_code}), no hang", file=sys.stderr)
        saved = True
        if failed or slow or stopped or named:
            saved = save_or_say(saveable(outcome.bundle), out, outcome.digest)
        write_html(outcome.report, html)
        if junit is not None:
            from hangdoc.render.junit import write_junit

            try:
                write_junit(junit, outcome.report, cmd, fail_on_slow=fail_on is FailOn.slow)
            except (OSError, HangdocError) as exc:     # a full disk, the name swapped for a device
                print(f"hangdoc: error: the JUnit result was not written to {junit}: "
                      f"{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            from hangdoc.base.outputs import append_output
            from hangdoc.render.markdown import report_markdown

            try:     # only a regular file, never waiting on a FIFO nobody reads
                append_output(summary, report_markdown(outcome.report) + "\n", "GITHUB_STEP_SUMMARY")
            except (OSError, HangdocError) as exc:
                print(f"hangdoc: cannot append to GITHUB_STEP_SUMMARY ({getattr(exc, 'strerror', None) or exc})",
                      file=sys.stderr)
    raise typer.Exit(delivered(outcome.exit_code, saved, came))
