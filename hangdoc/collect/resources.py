"""What the job's data pipeline may use besides its CPUs' list: the /dev/shm the ranks see, their CPU quota."""
from __future__ import annotations

import os
from pathlib import Path

from hangdoc.base.parse import to_int
from hangdoc.model import CpuQuota, Job, Role, ShmUse


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


def cpu_quota(job: Job, proc_root: str | Path = "/proc", cgroup_root: str | Path = "/sys/fs/cgroup") -> CpuQuota | None:
    """The tightest CPU quota over the first rank's cgroup and its parents, with that cgroup's
    throttling counters; None where none is set or the cgroup files cannot be read. cgroup v2
    (cpu.max) and v1 (cpu.cfs_quota_us) alike: a few small files, every round."""
    rank = next(iter(job.by_role(Role.RANK)), None)
    if rank is None:
        return None
    try:
        lines = Path(f"{proc_root}/{rank.pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    root, found = Path(cgroup_root), []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and not controllers:
            base = root if (root / "cgroup.controllers").exists() else root / "unified"
            found += [q for d, cg in _ancestors(base, path) if (q := _v2(d, cg)) is not None]
        elif "cpu" in controllers.split(","):
            base = next((b for b in (root / controllers, root / "cpu", root / "cpu,cpuacct") if b.is_dir()), None)
            if base is not None:
                found += [q for d, cg in _ancestors(base, path) if (q := _v1(d, cg)) is not None]
    return min(found, key=lambda q: q.cores) if found else None


def _ancestors(base: Path, path: str):
    """(directory, cgroup path) from the cgroup itself up to the hierarchy's root."""
    parts = [p for p in path.strip().split("/") if p and p != ".."]
    for n in range(len(parts), -1, -1):
        yield base.joinpath(*parts[:n]), "/" + "/".join(parts[:n])


def _stat(directory: Path) -> dict[str, int]:
    try:
        text = (directory / "cpu.stat").read_text()
    except OSError:
        return {}
    return {k: v for k, _, raw in (line.partition(" ") for line in text.splitlines())
            if (v := to_int(raw.strip())) is not None}


def _v2(directory: Path, cgroup: str) -> CpuQuota | None:
    try:
        quota, _, period = (directory / "cpu.max").read_text().strip().partition(" ")
    except OSError:
        return None
    q, p = to_int(quota), to_int(period)
    if q is None or not p:
        return None          # "max": no quota here
    stat = _stat(directory)
    return CpuQuota(cgroup, round(q / p, 3), stat.get("nr_periods", 0), stat.get("nr_throttled", 0),
                    stat.get("throttled_usec", 0) / 1e6)


def _v1(directory: Path, cgroup: str) -> CpuQuota | None:
    try:
        q = to_int((directory / "cpu.cfs_quota_us").read_text().strip())
        p = to_int((directory / "cpu.cfs_period_us").read_text().strip())
    except OSError:
        return None
    if q is None or q <= 0 or not p:
        return None          # -1: no quota here
    stat = _stat(directory)
    return CpuQuota(cgroup, round(q / p, 3), stat.get("nr_periods", 0), stat.get("nr_throttled", 0),
                    stat.get("throttled_time", 0) / 1e9)
