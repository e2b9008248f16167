"""Facts about the machine and the job's Python and torch."""
from __future__ import annotations

import os
import platform
import socket

from hangdoc.collect.procfs import ProcDenied, ProcFS, ProcGone, python_version_from_paths, torch_version_from_paths
from hangdoc.model import Host, Job, Role


def host_facts(job: Job, procfs: ProcFS) -> Host:
    paths: set[str] = set()
    for rank in job.by_role(Role.RANK)[:1]:
        try:
            paths = procfs.maps_paths(rank.pid)
        except (ProcGone, ProcDenied):
            paths = set()
    exe = next((p.exe for p in job.by_role(Role.RANK) if p.exe), None)
    python = python_version_from_paths(paths) or (python_version_from_paths({exe + "/"}) if exe else None)
    return Host(
        hostname=socket.gethostname(),
        arch=platform.machine(),
        kernel=platform.release(),
        cpu_count=os.cpu_count() or 1,
        python_version=python,
        torch_version=torch_version_from_paths(paths),
    )
