"""What the job's data pipeline may use besides CPUs: the /dev/shm the ranks see."""
from __future__ import annotations

import os
from pathlib import Path

from hangdoc.model import Job, Role, ShmUse


def shm_use(job: Job, proc_root: str | Path = "/proc") -> ShmUse | None:
    """The /dev/shm of the first rank, read through its root (a container's own mount); None where
    there is no rank or it cannot be read (one statvfs: cheap enough for every round)."""
    rank = next(iter(job.by_role(Role.RANK)), None)
    if rank is None:
        return None
    try:
        st = os.statvfs(f"{proc_root}/{rank.pid}/root/dev/shm")
    except OSError:
        return None
    size = st.f_blocks * st.f_frsize
    return ShmUse(size_bytes=size, used_bytes=size - st.f_bfree * st.f_frsize) if size else None
