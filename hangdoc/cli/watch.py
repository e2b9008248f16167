"""`hangdoc watch PID` (or `--job`): attach to a running job, sample it, and report a hang when it is one."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Optional

import typer

from hangdoc.base.errors import EXIT_NOT_SAVED, EXIT_OK, EXIT_SIGINT, STOP_SIGNALS, BundleNotSaved, HangdocError
from hangdoc.bundle.files import check_writable
from hangdoc.cli import app
from hangdoc.cli.common import (
    Engine, default_out, delivered, distinct_outputs, emit_report, engine_option, hang_after_option, html_option,
    html_target, interval_option, open_recorder, record_option, report_format_option, save_or_say, signals_held,
    timeout_option, write_html,
)
from hangdoc.model import Role, StopReason, Verdict
from hangdoc.render.formats import OutputFormat


@app.command()
def watch(
    target: Optional[str] = typer.Argument(
        None, metavar="[PID]",
        help="Any pid of the job: the torchrun launcher, a rank or a DataLoader worker. With --job: the "
             "run id (or launcher pid) of the job to pick among this node's jobs."),
    job: bool = typer.Option(False, "--job", help="Find the job on this node, no pid needed (what a cluster's "
                             "launcher runs on every node); with several jobs here, name one: --job RUN_ID."),
    once: bool = typer.Option(False, "--once", help="Capture one snapshot, write the bundle and exit."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Where to save the bundle (default ./hangdoc-<time>.json.zst, "
                                       "or in the temporary directory where . cannot be written; a name ending in .json "
                                       "writes plain JSON); a bundle named here is written whatever the end, a healthy one too."),
    interval: float = interval_option(),
    hang_after: Optional[float] = hang_after_option(),
    timeout: Optional[float] = timeout_option("Stop watching after this many seconds (exit 0 if nothing was found)."),
    fmt: OutputFormat = report_format_option(),
    html: Optional[Path] = html_option(),
    no_live: bool = typer.Option(False, "--no-live", help="No live table; a status line on stderr every few samples."),
    native: bool = typer.Option(False, "--native", help="Also capture native (C/C++) frames; about 1 s a process."),
    nonblocking: bool = typer.Option(False, "--nonblocking", help="Do not pause processes while reading stacks (less exact)."),
    single: bool = typer.Option(False, "--single", help="Allow a Python process that is not part of a distributed job."),
    py_spy: Optional[str] = typer.Option(None, "--py-spy", help="Path of the py-spy binary to use."),
    engine: Engine = engine_option(),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="Do not sample GPUs through NVML."),
    record: Optional[Path] = record_option(),
) -> None:
    """Attach to a running torchrun / DDP job (any of its pids, or --job: the one on this node) and diagnose it.

    With no pid, or with --job, hangdoc finds the job on this node itself; with several there,
    name one: --job RUN_ID (or its launcher pid).

    It watches until a verdict ends it: a hang (exit 3) or a crash (4) at once; a slow job (8) once
    it has read slow the same way (the same stragglers, or data-bound) for 5 rounds in a row over
    at least 30 s and the hang threshold; the job ending (0 well, 5 when the ranks vanished and
    nothing says how); --timeout (0 with nothing found, 8 slow, 7 suspect); or Ctrl-C / SIGTERM / SIGHUP
    (the report so far, the bundle saved, 130 / 143). A healthy job is watched until it ends.
    2 on usage or attach errors, 6 when the report was printed but the bundle could not be saved.
    """
    from hangdoc.live.capture import node_digest, snapshot_once
    from hangdoc.live.options import WatchOptions
    from hangdoc.live.probes import make_probes

    if native and nonblocking:
        raise HangdocError("--native and --nonblocking do not go together: py-spy reads native frames only "
                           "from a paused process (drop --nonblocking to see them)")
    pid = job_pid(target, job)
    named = out is not None          # a bundle named is always written (or why not said)
    distinct_outputs(out=out, html=html, record=record)
    out = check_writable(out or default_out())
    html = html_target(html)
    options = WatchOptions(interval_s=interval, hang_after_s=hang_after, timeout_s=timeout, native=native,
                           nonblocking=nonblocking, single=single, engine=engine, py_spy=py_spy,
                           gpu=not no_gpu, stop_when_slow=True)
    probes = make_probes(options)
    from hangdoc.live.attach import find_job_waiting

    find_job_waiting(pid, probes.procfs, single=single, notify=lambda line: print(f"hangdoc: {line}", file=sys.stderr))
    if once:
        from hangdoc.bundle.files import save_bundle

        bundle = snapshot_once(pid, probes, options)
        try:
            save_bundle(bundle, out, node_digest(bundle))
        except OSError as exc:     # the disk filled, the place went away: one line, exit 6
            raise BundleNotSaved(f"the bundle was not saved to {out}: {exc.strerror or exc} "
                                 "(free some space or pass --out to a writable place)") from None
        job = bundle.job
        print(f"hangdoc: captured {len(job.by_role(Role.RANK))} ranks, "
              f"{len(job.by_role(Role.WORKER))} DataLoader workers, "
              f"{len(job.by_role(Role.CHILD))} other children in {bundle.last.took_s:.2f} s -> {out}",
              file=sys.stderr)
        require_some_stack(bundle)
        print(once_verdict(bundle, out), file=sys.stderr)
        raise typer.Exit(EXIT_OK)

    from hangdoc.render.live import LiveView
    from hangdoc.live.watcher import Watcher

    recorder = open_recorder(record, "watch")
    watcher = Watcher(pid, probes, options, recorder=recorder)
    view = LiveView(sys.stderr, live=not no_live)
    try:
        require_some_stack(watcher.start())
        outcome = watcher.run(view.update)
    except KeyboardInterrupt as exc:   # Ctrl-C, or SIGTERM (hangdoc.base.errors.Interrupted)
        for number in STOP_SIGNALS:                    # a second Ctrl-C must not lose the save
            signal.signal(number, signal.SIG_IGN)
        view.close()
        raise typer.Exit(interrupted(watcher.stopped(getattr(exc, "exit_code", EXIT_SIGINT)), out, fmt, html))
    finally:
        view.close()
        if recorder is not None:
            recorder.close()
    raise typer.Exit(finish(outcome, out, fmt, html, named))


def once_verdict(bundle, out: Path) -> str:
    """What `hangdoc report` of the snapshot will say, in one line, and why no more than that."""
    from hangdoc.render.escape import terminal
    from hangdoc.render.words import headline
    from hangdoc.report.judge import judge

    return (f"hangdoc: {terminal(headline(judge(bundle).report))}\n"
            f"hangdoc: from one snapshot a hang reads SUSPECT at most (a hang and a slow step look alike in one "
            f"instant): watch without --once for a verdict; the whole report: hangdoc report {out}")


def require_some_stack(bundle) -> None:
    """Say why ranks have no stack; with none at all there is nothing to diagnose (exit 2),
    and `--once` must not report success."""
    from hangdoc.analyze.facts import missing_stacks, stackless_ranks
    from hangdoc.render.escape import terminal

    for line in missing_stacks(bundle):
        print(f"hangdoc: warning: {terminal(line)}", file=sys.stderr)
    missing = stackless_ranks(bundle)
    if bundle.job.ranks and len(missing) == len(bundle.job.ranks):
        raise HangdocError(f"no stack of any rank could be read ({terminal(missing[0][2])}); "
                           "see `hangdoc explain no-stack`")


def interrupted(outcome, out: Path, fmt: OutputFormat, html: Path | None = None) -> int:
    """Stopped by Ctrl-C or SIGTERM: the report of what was seen so far, and the bundle, kept."""
    if outcome is None:
        print("hangdoc: interrupted before the first sample; nothing to save", file=sys.stderr)
        return EXIT_SIGINT
    print(f"hangdoc: interrupted after {len(outcome.bundle.samples)} samples; the report so far:", file=sys.stderr)
    emit_report(outcome.report, fmt)
    write_html(outcome.report, html)
    saved = save_or_say(outcome.bundle, out, outcome.digest)
    return outcome.exit_code if saved else EXIT_NOT_SAVED


def finish(outcome, out: Path, fmt: OutputFormat, html: Path | None = None, named: bool = False) -> int:
    """Print the report, then save the bundle when there is something to show or it was named
    (`--out`); the judgement's exit code."""
    if outcome.reason is StopReason.TIMEOUT:
        found = "the job is slow" if outcome.report.verdict == Verdict.SLOW else "no hang found"
        print(f"hangdoc: --timeout reached, {found}", file=sys.stderr)
    elif outcome.reason is StopReason.ENDED:
        print("hangdoc: the job ended", file=sys.stderr)
    elif outcome.reason is StopReason.SLOW:
        print("hangdoc: the job is slow, the same way round after round: stopped watching", file=sys.stderr)
    keep = outcome.reason in (StopReason.HANG, StopReason.CRASH) or outcome.report.verdict == Verdict.SLOW or (
        outcome.reason is StopReason.ENDED and outcome.report.verdict == Verdict.ENDED) or named
    with signals_held() as came:      # a Ctrl-C or SIGTERM now must not cut the report or the save short
        emit_report(outcome.report, fmt)
        write_html(outcome.report, html)
        saved = not keep or save_or_say(outcome.bundle, out, outcome.digest)
    return delivered(outcome.exit_code, saved, came, "" if not keep else " and the bundle saved")


def job_pid(target: str | None, by_job: bool) -> int:
    """The pid to attach to: the one given, or (with --job or no pid) this node's job's launcher."""
    if target is not None and not by_job:
        if not target.isdigit():
            raise HangdocError(f"{target!r} is not a pid; to pick a job by its run id use --job {target}")
        return int(target)
    from hangdoc.collect.jobs import pick_job

    chosen = pick_job(target)
    elsewhere = "" if chosen.session in (None, os.getsid(0)) else " (not started from this terminal's session)"
    print(f"hangdoc: watching {chosen.label}{elsewhere}", file=sys.stderr)
    return chosen.anchor
