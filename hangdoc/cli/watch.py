"""`hangdoc watch PID`: attach to a running job, sample it, and report a hang when it is one."""
from __future__ import annotations

import sys
import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from hangdoc.bundle_io import check_writable, save_bundle
from hangdoc.cli import app
from hangdoc.errors import EXIT_OK


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


def default_out() -> Path:
    return Path(f"hangdoc-{time.strftime('%Y%m%d-%H%M%S')}.json")


@app.command()
def watch(
    pid: int = typer.Argument(..., help="Any pid of the job: the torchrun launcher, a rank or a DataLoader worker."),
    once: bool = typer.Option(False, "--once", help="Capture one snapshot, write the bundle and exit."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Where to save the bundle (default ./hangdoc-<time>.json)."),
    native: bool = typer.Option(False, "--native", help="Also capture native (C/C++) frames; about 1 s a process."),
    nonblocking: bool = typer.Option(False, "--nonblocking", help="Do not pause processes while reading stacks (less exact)."),
    single: bool = typer.Option(False, "--single", help="Allow a Python process that is not part of a distributed job."),
    py_spy: Optional[str] = typer.Option(None, "--py-spy", help="Path of the py-spy binary to use."),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="Do not sample GPUs through NVML."),
) -> None:
    """Attach to a running torchrun / DDP job from any of its pids and diagnose it."""
    from hangdoc.pipeline import make_probes, snapshot_once

    out = check_writable(out or default_out())
    probes = make_probes(py_spy=py_spy, gpu=not no_gpu)
    if once:
        bundle = snapshot_once(pid, probes, single=single, native=native, nonblocking=nonblocking)
        save_bundle(bundle, out)
        job = bundle.job
        from hangdoc.model import Role

        print(f"hangdoc: captured {len(job.by_role(Role.RANK))} ranks, "
              f"{len(job.by_role(Role.WORKER))} DataLoader workers, "
              f"{len(job.by_role(Role.CHILD))} other children in {bundle.last.took_s:.2f} s -> {out}",
              file=sys.stderr)
        raise typer.Exit(EXIT_OK)
    raise typer.Exit(EXIT_OK)
