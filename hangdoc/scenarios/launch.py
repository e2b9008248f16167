"""Start a scenario's torchrun job, wait for its markers, and end the whole of it.

The job control itself (a session of its own, ending every rank's session) is the
product's, `hangdoc/live/proc.py`: `hangdoc run` ends the jobs it starts the same way.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from hangdoc.live.proc import RunningJob, start_job, stop_job

__all__ = ["RunningJob", "start_job", "stop_job", "torch_missing", "torchrun_cmd", "wait_for"]


def torchrun_cmd(script: str | Path, *args: str, nproc: int = 2, python: str | None = None,
                 extra: tuple[str, ...] = ()) -> list[str]:
    """A torchrun command line: one node on loopback with a free port unless `extra` sets rendezvous."""
    rendezvous = list(extra) or ["--standalone"]
    return [python or sys.executable, "-m", "torch.distributed.run",
            f"--nproc_per_node={nproc}", *rendezvous, str(script), *args]


def torch_missing(python: str | None = None, timeout: float = 120.0) -> str | None:
    """Why `python` cannot run the zoo's jobs (torch and torch.distributed do not import there), in
    a few words; None when it can. Imported in a child, as the job will: a broken or shadowed torch
    counts as missing too."""
    import subprocess

    try:
        done = subprocess.run([python or sys.executable, "-c", "import torch, torch.distributed"],
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not start it ({exc})"
    if done.returncode == 0:
        return None
    last = [line for line in (done.stderr or "").splitlines() if line.strip()]
    return last[-1].strip()[:160] if last else f"exit status {done.returncode}"


def wait_for(paths: list[Path] | Path, job: RunningJob | None = None, timeout: float = 60.0,
             poll: float = 0.05) -> bool:
    """Wait until every path exists; False on timeout or when the job exits first."""
    paths = [paths] if isinstance(paths, Path) else list(paths)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job is not None:
            job.refresh_tree()
        if all(p.exists() for p in paths):
            return True
        if job is not None and job.popen.poll() is not None:
            return all(p.exists() for p in paths)
        time.sleep(poll)
    return False
