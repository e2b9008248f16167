"""Every distributed job on this node, from /proc: launchers (torchrun agents), ranks, workers.

`hangdoc ps` lists them; `hangdoc watch --job` picks one, so that a cluster's launcher
(srun, kubectl exec, pdsh) can start hangdoc on each node without knowing a pid. One
entry per launcher: two agents of one job on one node (a test on one machine) are two
entries with one run id, told apart by their launcher pid and group rank.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from hangdoc.base.words import rank_ranges
from hangdoc.collect.discover import (_Table, is_python, job_identity, launcher_of, local_rank_of, rank_identity,
                                     start_method)
from hangdoc.collect.procfs import ProcDenied, ProcFS, ProcGone
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
    owner: int | None = None       # the uid its launcher (or first rank) runs as
    session: int | None = None     # that process's session id: the terminal (or tmux, ssh) it came from
    started: float | None = None   # when that process started, seconds since the epoch

    @property
    def anchor(self) -> int:
        """The pid to attach to: the launcher, else the first rank."""
        return self.launcher_pid if self.launcher_pid is not None else self.ranks[0].pid

    @property
    def workers(self) -> int:
        return sum(r.workers for r in self.ranks)

    @property
    def label(self) -> str:
        """"launcher pid 1000 (torchrun): ranks 0-1 of 4, node 0 of 2, run job-a, master 10.0.0.1:29500,
        user alice, started 04:12": what is known, nothing said of what is not."""
        if self.launcher_pid is not None:
            head = f"launcher pid {self.launcher_pid} ({self.launcher})"
        else:
            pids = ", ".join(str(r.pid) for r in self.ranks[:4]) + (", ..." if len(self.ranks) > 4 else "")
            head = f"pid {pids} (no launcher)"
        ranks = rank_ranges(r.rank for r in self.ranks if r.rank is not None)
        count = f"rank{'s' if len(self.ranks) != 1 else ''} {ranks}" if ranks else f"{len(self.ranks)} ranks"
        parts = [count + (f" of {self.world_size}" if self.world_size else "")]
        if self.group_rank is not None:
            parts.append(f"node {self.group_rank}" + (f" of {self.group_world_size}" if self.group_world_size else ""))
        if self.run_id:
            parts.append(f"run {self.run_id}")
        if self.master_addr or self.master_port:
            parts.append(f"master {self.master_addr or '?'}:{self.master_port or '?'}")
        if self.owner is not None:
            parts.append(f"user {user_name(self.owner)}")
        if self.started is not None:
            parts.append(f"started {time.strftime('%H:%M', time.localtime(self.started))}")
        return f"{head}: {', '.join(parts)}"


def user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


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
    anchor = launcher if launcher is not None else ranks[0].pid
    try:
        stat = table.procfs.stat(anchor)
        session, started = stat.session, stat.start_time
    except (ProcGone, ProcDenied, ValueError, IndexError):
        session = started = None
    return NodeJob(
        **job_identity(env),
        group_rank=to_int(env.get("GROUP_RANK")),
        group_world_size=to_int(env.get("GROUP_WORLD_SIZE")),
        launcher_pid=launcher,
        launcher=_launcher_name(table.procfs.cmdline_or_empty(launcher)) if launcher is not None else None,
        ranks=tuple(ranks),
        owner=table.procfs.owner(anchor),
        session=session,
        started=started,
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


def pick_job(want: str | None = None, procfs: ProcFS | None = None,
             caller: tuple[int, int] | None = None) -> NodeJob:
    """The job `want` names (a run id, or a launcher or rank pid); with none, the caller's job: of
    its user, and of its session (its terminal) when several are. `caller`: (uid, session id),
    hangdoc's own by default. Another user's job is never picked without being named."""
    jobs = list_jobs(procfs)
    if not jobs:
        raise HangdocError(
            "no distributed job found on this node: no process readable by this user has RANK and "
            "WORLD_SIZE (or OMPI_COMM_WORLD_RANK / PMI_RANK) in its environment; run hangdoc as the "
            "job's user (or root), inside the job's container, or give a pid")
    if want is None:
        return _callers_job(jobs, caller or (os.getuid(), os.getsid(0)))
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


def _callers_job(jobs: list[NodeJob], caller: tuple[int, int]) -> NodeJob:
    uid, session = caller
    mine = [j for j in jobs if j.owner is None or j.owner == uid]
    here = [j for j in mine if j.session == session]
    if len(here) == 1 or len(mine) == 1:
        return (here or mine)[0]
    if not mine:
        raise HangdocError(f"no job of user {user_name(uid)} on this node, only other users' "
                           f"(name one to watch it: `hangdoc watch PID` or --job RUN_ID):\n{_listing(jobs)}")
    raise HangdocError(f"{len(mine)} jobs of user {user_name(uid)} on this node; pick one with --job RUN_ID (or "
                       f"its launcher pid: --job PID, or `hangdoc watch PID`):\n{_listing(mine)}")


def _listing(jobs: list[NodeJob]) -> str:
    return "\n".join(f"  {job.label}" for job in jobs)
