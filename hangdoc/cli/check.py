"""`hangdoc check data|env|checkpoint`: preflight checks that find tomorrow's hang today.

Each command parses, calls its pipeline in `hangdoc.check`, renders, and maps the
findings to an exit code: 0 clean, 1 findings at or above --fail-on, 2 bad input.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from hangdoc.check.checkpoint import check_checkpoint
from hangdoc.check.data import DEFAULT_SAMPLE, check_data
from hangdoc.check.env import DEFAULT_PREFETCH, check_env
from hangdoc.check.findings import exit_code
from hangdoc.check.model import CheckResult
from hangdoc.cli import app
from hangdoc.cli.common import check_format_option
from hangdoc.render.formats import OutputFormat, render_check
from hangdoc.model import Severity

check_app = typer.Typer(no_args_is_help=True,
                        help="Preflight: find tomorrow's hang in the data, the host or the checkpoint.")
app.add_typer(check_app, name="check")

FAIL_ON_HELP = "Exit 1 when a finding is at least this severe: critical, warning or info."


def fail_on_option():
    return typer.Option(Severity.WARNING, "--fail-on", case_sensitive=False, help=FAIL_ON_HELP)


def _finish(result: CheckResult, fmt: OutputFormat, fail_on: Severity) -> None:
    render_check(result, fmt, sys.stdout)
    raise typer.Exit(exit_code(result.findings, fail_on))


@check_app.command("data")
def data(
    lists: list[Path] = typer.Argument(..., metavar="DATA_LIST", show_default=False,
                                       help="WeNet shard lists (tar paths) or raw lists (JSON lines)."),
    world_size: Optional[int] = typer.Option(
        None, "--world-size", "-w", show_default=False,
        help="Ranks in the job (W). Default: torchrun's WORLD_SIZE, else the job running on this node, else "
             "one rank per visible GPU, else 1 (said on stderr)."),
    num_workers: Optional[int] = typer.Option(
        None, "--num-workers", "-k", show_default=False,
        help="DataLoader workers per rank (K). Default: 1, DataLoader's own default (num_workers=0: the rank "
             "reads its data as one worker; said on stderr)."),
    sample: int = typer.Option(DEFAULT_SAMPLE, "--sample", min=0, help="Shards to read in full and time."),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1,
                                          help="Utterances per batch: compare ranks in batches."),
    fail_on: Severity = fail_on_option(),
    fmt: OutputFormat = check_format_option(),
) -> None:
    """Check data lists: missing, broken or compressed shards, and what each rank and worker gets."""
    from hangdoc.check.progress_bar import Progress

    if world_size is None:
        from hangdoc.check.world import known_world_size

        world_size, why = known_world_size()
        print(f"hangdoc: --world-size not given: checking for {world_size} rank{'s' if world_size != 1 else ''} "
              f"({why}); pass --world-size W for another", file=sys.stderr)
    if num_workers is None:
        num_workers = 1
        print("hangdoc: --num-workers not given: checking for 1 worker per rank (DataLoader's default, "
              "num_workers=0, reads in the rank as one worker); pass --num-workers K for another", file=sys.stderr)
    progress = Progress("check data: reading shard headers")
    try:
        result = check_data(lists, world_size, num_workers, sample=sample, batch_size=batch_size,
                            progress=progress)
    finally:
        progress.close()
    _finish(result, fmt, fail_on)


@check_app.command("env")
def env(
    num_workers: int | None = typer.Option(None, "--num-workers", "-k", help="DataLoader workers per rank."),
    nproc_per_node: int = typer.Option(1, "--nproc-per-node", min=1, help="Ranks on this node."),
    prefetch_factor: int = typer.Option(DEFAULT_PREFETCH, "--prefetch-factor", min=1,
                                        help="Batches each worker prefetches."),
    batch_bytes: int | None = typer.Option(None, "--batch-bytes", min=1, help="Bytes of one batch in shared memory."),
    fail_on: Severity = fail_on_option(),
    fmt: OutputFormat = check_format_option(),
) -> None:
    """Check this host and the launch settings: fork on ARM, CPUs, ptrace, py-spy, NVML, /dev/shm, timeouts."""
    result = check_env(num_workers, nproc_per_node, prefetch_factor, batch_bytes)
    _finish(result, fmt, fail_on)


@check_app.command("checkpoint")
def checkpoint(
    path: Path = typer.Argument(..., metavar="CKPT", show_default=False, help="A torch.save'd checkpoint (.pt)."),
    fail_on: Severity = fail_on_option(),
    fmt: OutputFormat = check_format_option(),
) -> None:
    """Check what resuming from a checkpoint restores (loaded with weights_only=True: no code runs)."""
    result = check_checkpoint(path)
    _finish(result, fmt, fail_on)
