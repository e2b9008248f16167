"""Every distributed job on this node, from /proc: launchers (torchrun agents), ranks, workers.

`hangdoc ps` lists them; `hangdoc watch --job` picks one, so that a cluster's launcher
(srun, kubectl exec, pdsh) can start hangdoc on each node without knowing a pid. One
entry per launcher: two agents of one job on one node (a test on one machine) are two
entries with one run id, told apart by their launcher pid and group rank.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass

from hangdoc.base.words import rank_ranges
from hangdoc.collect.discover import (_Table, is_python, job_identity, launcher_of, local_rank_of, rank_identity,
                                     start_method)
from hangdoc.collect.procfs import ProcFS
from hangdoc.base.errors import HangdocError
from hangdoc.base.parse import to_int


@dataclass(frozen=True)
class RankEntry:
    pid: int
    rank: int | None
    local_rank: int | None
    workers: int                   # multiprocessing children: DataLoader workers, most of the time


@dataclass(frozen=True)
class NodeJob:
    """One launcher's share of a job on this node, and who the job is."""

    run_id: str | None
    master_addr: str | None
    master_port: int | None
    world_size: int | None
    group_rank: int | None         # this node's index in the job (torchrun's GROUP_RANK)
    group_world_size: int | None   # how many nodes the job spans
    launcher_pid: int | None
    launcher: str | None           # "torchrun", "mpirun", ... or the launcher's program name
    ranks: tuple[RankEntry, ...]

    @property
    def anchor(self) -> int:
        """The pid to attach to: the launcher, else the first rank."""
        return self.launcher_pid if self.launcher_pid is not None else self.ranks[0].pid

    @property
    def workers(self) -> int:
        return sum(r.workers for r in self.ranks)

    @property
    def label(self) -> str:
        where = f"{self.master_addr}:{self.master_port}" if self.master_addr or self.master_port else "no master"
        node = f", node {self.group_rank}" if self.group_rank is not None else ""
        nodes = f" of {self.group_world_size}" if node and self.group_world_size else ""
        launcher = (f"launcher pid {self.launcher_pid} ({self.launcher})" if self.launcher_pid is not None
                    else "no launcher")
        ranks = rank_ranges(r.rank for r in self.ranks if r.rank is not None) or "?"
        return (f"run {self.run_id or '?'} at {where}{node}{nodes}, world size {self.world_size or '?'}: "
                f"{launcher}, ranks {ranks}")


def this_host() -> str:
    return socket.gethostname()


def list_jobs(procfs: ProcFS | None = None) -> list[NodeJob]:
    """The jobs whose ranks this user can see on this node, ordered by run id, node and launcher."""
    table = _Table(procfs or ProcFS())
    groups: dict[tuple, list[int]] = {}
    for pid in sorted(table.parent):
        if not table.is_rank(pid):
            continue
        launcher = launcher_of(table, pid)
        env = table.env(pid)
        identity = (env.get("TORCHELASTIC_RUN_ID"), env.get("MASTER_ADDR"), env.get("MASTER_PORT"))
        groups.setdefault((launcher, identity if launcher is None else None), []).append(pid)
    jobs = [_node_job(table, launcher, pids) for (launcher, _), pids in groups.items()]
    return sorted(jobs, key=lambda j: (j.run_id or "", j.group_rank if j.group_rank is not None else -1,
                                       j.anchor))


def _node_job(table: _Table, launcher: int | None, pids: list[int]) -> NodeJob:
    ranks = []
    for pid in pids:
        env = table.env(pid)
        identity = rank_identity(env)
        ranks.append(RankEntry(pid=pid, rank=identity[0] if identity else None,
                               local_rank=local_rank_of(env),
                               workers=_workers(table, pid)))
    ranks.sort(key=lambda r: (r.rank is None, r.rank, r.pid))
    env = table.env(ranks[0].pid)
    return NodeJob(
        **job_identity(env),
        group_rank=to_int(env.get("GROUP_RANK")),
        group_world_size=to_int(env.get("GROUP_WORLD_SIZE")),
        launcher_pid=launcher,
        launcher=_launcher_name(table.procfs.cmdline_or_empty(launcher)) if launcher is not None else None,
        ranks=tuple(ranks),
    )


def _workers(table: _Table, rank_pid: int) -> int:
    count = 0
    for child in table.descendants(rank_pid):
        cmdline = table.procfs.cmdline_or_empty(child)
        parent = table.procfs.cmdline_or_empty(table.parent.get(child, 0))
        if (is_python(cmdline, None) and start_method(cmdline, parent)
                and "resource_tracker" not in " ".join(cmdline)):
            count += 1
    return count


def _launcher_name(cmdline: tuple[str, ...]) -> str | None:
    words = " ".join(cmdline)
    for module, name in (("torch.distributed.run", "torchrun"), ("torch.distributed.launch", "torch.distributed.launch")):
        if module in words:
            return name
    for word in cmdline[:3]:
        base = word.rsplit("/", 1)[-1]
        if base and not base.startswith("python"):
            return base
    return cmdline[0].rsplit("/", 1)[-1] if cmdline else None


def pick_job(want: str | None = None, procfs: ProcFS | None = None) -> NodeJob:
    """The job `want` names (a run id, or a launcher or rank pid), or the only job on this node."""
    jobs = list_jobs(procfs)
    if not jobs:
        raise HangdocError(
            "no distributed job found on this node: no process readable by this user has RANK and "
            "WORLD_SIZE (or OMPI_COMM_WORLD_RANK / PMI_RANK) in its environment; run hangdoc as the "
            "job's user (or root), inside the job's container, or give a pid")
    if want is None:
        if len(jobs) == 1:
            return jobs[0]
        raise HangdocError(f"{len(jobs)} jobs on this node; pick one with --job RUN_ID (or its launcher "
                           f"pid: --job PID, or `hangdoc watch PID`):\n{_listing(jobs)}")
    chosen = [j for j in jobs if j.run_id == want]
    if not chosen and want.isdigit():
        pid = int(want)
        chosen = [j for j in jobs if j.launcher_pid == pid or any(r.pid == pid for r in j.ranks)]
    if len(chosen) == 1:
        return chosen[0]
    if not chosen:
        raise HangdocError(f"no job with run id or pid {want} on this node; the jobs here:\n{_listing(jobs)}")
    raise HangdocError(f"{len(chosen)} launchers on this node run job {want} (agents of one job side by "
                       f"side); pick one by its launcher pid (--job PID):\n{_listing(chosen)}")


def _listing(jobs: list[NodeJob]) -> str:
    return "\n".join(f"  {job.label}" for job in jobs)
