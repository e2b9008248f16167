"""`hangdoc ps`: the distributed jobs on this node, their ranks and workers."""
from __future__ import annotations

import json
import sys
from enum import Enum

import typer

from hangdoc.cli import app
from hangdoc.base.errors import EXIT_OK


class PsFormat(str, Enum):
    text = "text"
    json = "json"


@app.command()
def ps(fmt: PsFormat = typer.Option(PsFormat.text, "--format", "-f", help="text or json.")) -> None:
    """List the torchrun / DDP jobs on this node: run id, master, world size, node, launcher, ranks.

    For each job: the run id, master address and port, world size, this node's group rank,
    the launcher's pid, and every rank's pid with its rank, local rank and DataLoader workers.

    On a cluster, run it on every node (`srun --overlap --jobid=JOB --ntasks-per-node=1 hangdoc ps`).
    Exits 0, with or without jobs.
    """
    from hangdoc.collect.jobs import list_jobs, this_host
    from hangdoc.base.serde import to_dict

    host, jobs = this_host(), list_jobs()
    if fmt is PsFormat.json:
        print(json.dumps({"host": host, "jobs": [dict(to_dict(j), workers=j.workers, flight_recorder=flight_of(j))
                                                 for j in jobs]}, indent=2))
        raise typer.Exit(EXIT_OK)
    if not jobs:
        print(f"{host}: no distributed job (no process with RANK and WORLD_SIZE readable by this user)")
        raise typer.Exit(EXIT_OK)
    print(f"{host}: {len(jobs)} job{'s' if len(jobs) > 1 else ''}")
    for job in jobs:
        print(job_text(job))
    sys.stdout.flush()
    raise typer.Exit(EXIT_OK)


def job_text(job) -> str:
    where = f"{job.master_addr}:{job.master_port}" if job.master_addr or job.master_port else "-"
    node = "-" if job.group_rank is None else str(job.group_rank)
    if job.group_rank is not None and job.group_world_size:
        node += f" of {job.group_world_size}"
    launcher = f"{job.launcher_pid} ({job.launcher})" if job.launcher_pid is not None else "-"
    lines = [f"run {job.run_id or '-'}  master {where}  world size {job.world_size or '-'}  node {node}  "
             f"launcher {launcher}  {len(job.ranks)} rank{'s' if len(job.ranks) != 1 else ''}, "
             f"{job.workers} worker{'s' if job.workers != 1 else ''}"]
    fr = flight_of(job)
    lines.append(f"  {'RANK':<6} {'LOCAL':<6} {'PID':<8} {'WORKERS':<8} FLIGHT RECORDER")
    for r in job.ranks:
        rank = "-" if r.rank is None else str(r.rank)
        local = "-" if r.local_rank is None else str(r.local_rank)
        lines.append(f"  {rank:<6} {local:<6} {r.pid:<8} {r.workers:<8} {fr.get(str(r.pid), '-')}")
    return "\n".join(lines)


def flight_of(job, procfs=None) -> dict[str, str]:
    """pid -> "on (2000 entries), pipe /tmp/fr_pipe_0.pipe" from each rank's environment."""
    from hangdoc.collect.flight_recorder import rank_flight_text

    return {str(r.pid): rank_flight_text(r.pid, r.rank, procfs) for r in job.ranks}
