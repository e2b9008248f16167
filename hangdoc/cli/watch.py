"""`hangdoc watch PID` (or `--job`): attach to a running job, sample it, and report a hang when it is one."""
from __future__ import annotations

import dataclasses
import signal
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from hangdoc.bundle.files import check_writable, save_bundle
from hangdoc.cli import app
from hangdoc.cli.common import (
    Engine, Format, emit_report, engine_option, format_option, hang_after_option, interval_option, timeout_option,
    verdict_exit_code,
)
from hangdoc.base.errors import EXIT_NOT_SAVED, EXIT_OK, EXIT_SIGINT, HangdocError
from hangdoc.model import Role



def default_out() -> Path:
    return Path(f"hangdoc-{time.strftime('%Y%m%d-%H%M%S')}.json.zst")


@app.command()
def watch(
    target: Optional[str] = typer.Argument(
        None, metavar="[PID]",
        help="Any pid of the job: the torchrun launcher, a rank or a DataLoader worker. With --job: the "
             "run id (or launcher pid) of the job to pick among this node's jobs."),
    job: bool = typer.Option(False, "--job", help="Find the job on this node, no pid needed (what a cluster's "
                             "launcher runs on every node); with several jobs here, name one: --job RUN_ID."),
    once: bool = typer.Option(False, "--once", help="Capture one snapshot, write the bundle and exit."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Where to save the bundle (default ./hangdoc-<time>.json.zst; a name ending in .json writes plain JSON)."),
    interval: float = interval_option(),
    hang_after: Optional[float] = hang_after_option(),
    timeout: Optional[float] = timeout_option("Stop watching after this many seconds (exit 0 if nothing was found)."),
    fmt: Format = format_option("Report format on stdout."),
    no_live: bool = typer.Option(False, "--no-live", help="No live table; a status line on stderr every few samples."),
    native: bool = typer.Option(False, "--native", help="Also capture native (C/C++) frames; about 1 s a process."),
    nonblocking: bool = typer.Option(False, "--nonblocking", help="Do not pause processes while reading stacks (less exact)."),
    single: bool = typer.Option(False, "--single", help="Allow a Python process that is not part of a distributed job."),
    py_spy: Optional[str] = typer.Option(None, "--py-spy", help="Path of the py-spy binary to use."),
    engine: Engine = engine_option(),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="Do not sample GPUs through NVML."),
) -> None:
    """Attach to a running torchrun / DDP job (any of its pids, or --job: the one on this node) and diagnose it.

    With no pid, or with --job, hangdoc finds the job on this node itself; with several there,
    name one: --job RUN_ID (or its launcher pid).

    Exits 3 on a hang (report on stdout, bundle saved), 4 if the job crashed, 0 if it ended
    well or --timeout passed with nothing found, 5 if the ranks vanished and nothing says how,
    2 on usage or attach errors, 6 when the report was printed but the bundle could not be saved.
    Ctrl-C / SIGTERM print the report so far, save the bundle and exit 130 / 143.
    """
    from hangdoc.live.pipeline import make_probes, snapshot_once

    pid = job_pid(target, job)
    out = check_writable(out or default_out())
    probes = make_probes(py_spy=py_spy, gpu=not no_gpu, engine=engine.value)
    if once:
        bundle = snapshot_once(pid, probes, single=single, native=native, nonblocking=nonblocking)
        save_bundle(bundle, out)
        job = bundle.job
        print(f"hangdoc: captured {len(job.by_role(Role.RANK))} ranks, "
              f"{len(job.by_role(Role.WORKER))} DataLoader workers, "
              f"{len(job.by_role(Role.CHILD))} other children in {bundle.last.took_s:.2f} s -> {out}",
              file=sys.stderr)
        require_some_stack(bundle)
        raise typer.Exit(EXIT_OK)

    from hangdoc.render.live import LiveView
    from hangdoc.live.watcher import WatchConfig, Watcher

    config = WatchConfig(interval_s=interval, hang_after_s=hang_after, timeout_s=timeout,
                         native=native, nonblocking=nonblocking, single=single)
    watcher = Watcher(pid, probes, config)
    view = LiveView(sys.stderr, live=not no_live)
    try:
        require_some_stack(watcher.start())
        outcome = watcher.run(view.update)
    except KeyboardInterrupt as exc:   # Ctrl-C, or SIGTERM (hangdoc.base.errors.Interrupted)
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not lose the save
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        view.close()
        raise typer.Exit(interrupted(watcher, out, fmt, getattr(exc, "exit_code", EXIT_SIGINT)))
    finally:
        view.close()
    raise typer.Exit(finish(outcome, out, fmt))


def require_some_stack(bundle) -> None:
    """Say why ranks have no stack; with none at all there is nothing to diagnose (exit 2),
    and `--once` must not report success."""
    from hangdoc.render.words import missing_stacks, stackless_ranks

    for line in missing_stacks([bundle]):
        print(f"hangdoc: warning: {line}", file=sys.stderr)
    missing = stackless_ranks(bundle)
    if bundle.job.ranks and len(missing) == len(bundle.job.ranks):
        raise HangdocError(f"no stack of any rank could be read ({missing[0][2]}); "
                           "see `hangdoc explain no-stack`")


def interrupted(watcher, out: Path, fmt: Format, code: int) -> int:
    """Stopped by Ctrl-C or SIGTERM: the report of what was seen so far, and the bundle, kept."""
    if not watcher.samples:
        print("hangdoc: interrupted before the first sample; nothing to save", file=sys.stderr)
        return code
    from hangdoc.report import build_report

    bundle = watcher.bundle()
    report = build_report(bundle, watcher.config.hang_after_s)
    if report.verdict == "healthy":
        report = dataclasses.replace(report, verdict="interrupted")
    print(f"hangdoc: interrupted after {len(bundle.samples)} samples; the report so far:", file=sys.stderr)
    emit_report(report, fmt, [bundle])
    saved = save_or_say(bundle, out)
    return code if saved else EXIT_NOT_SAVED


def save_or_say(bundle, out: Path) -> bool:
    """Save the bundle; a failure (disk full, the place gone) is one line, after the report."""
    try:
        save_bundle(bundle, out)
    except HangdocError as exc:
        print(f"hangdoc: error: the bundle was not saved: {exc}", file=sys.stderr)
        return False
    except OSError as exc:
        print(f"hangdoc: error: the bundle was not saved to {out}: {exc.strerror or exc} "
              "(free some space or pass --out to a writable place next time)", file=sys.stderr)
        return False
    print(f"hangdoc: bundle saved to {out} (replay: hangdoc report {out})", file=sys.stderr)
    return True


def finish(outcome, out: Path, fmt: Format) -> int:
    """Print the report, then save the bundle when there is something to show, and pick the exit code."""
    code = verdict_exit_code(outcome.report.verdict)
    if outcome.reason in ("hang", "crash"):
        emit_report(outcome.report, fmt, [outcome.bundle])
        if not save_or_say(outcome.bundle, out):
            return EXIT_NOT_SAVED
    elif outcome.reason == "timeout":
        print("hangdoc: --timeout reached, no hang found", file=sys.stderr)
        emit_report(outcome.report, fmt, [outcome.bundle])
    else:
        print("hangdoc: the job ended", file=sys.stderr)
        emit_report(outcome.report, fmt, [outcome.bundle])
        if outcome.report.verdict == "ended" and not save_or_say(outcome.bundle, out):
            return EXIT_NOT_SAVED
    return code


def job_pid(target: str | None, by_job: bool) -> int:
    """The pid to attach to: the one given, or (with --job or no pid) this node's job's launcher."""
    if target is not None and not by_job:
        if not target.isdigit():
            raise HangdocError(f"{target!r} is not a pid; to pick a job by its run id use --job {target}")
        return int(target)
    from hangdoc.collect.jobs import pick_job

    chosen = pick_job(target)
    print(f"hangdoc: watching {chosen.label}", file=sys.stderr)
    return chosen.anchor
