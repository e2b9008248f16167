"""From any pid of a job (launcher, rank, worker) to the whole job: launcher -> ranks -> children.

A rank is a process whose environment carries a rank and a world size (torchrun's
RANK/WORLD_SIZE, or MPI's and Slurm's equivalents) and whose parent does not: its
forked or spawned children inherit the variables, so the topmost carrier is the rank.
The launcher is the common parent of the ranks (torchrun, deepspeed, accelerate,
mpirun, a Slurm step): whoever started them.

Two launchers name no rank in any environment, and are read otherwise:
- Lightning's own (`python train.py` with `Trainer(devices=N, strategy="ddp")`): the script's
  process is rank 0 and starts the others again with LOCAL_RANK / NODE_RANK / WORLD_SIZE set;
- `torch.multiprocessing.spawn` and plain `multiprocessing` launchers: the ranks are the
  script's multiprocessing children, and each one's rank is read from its stack
  (`collect/spawned.py`: init_process_group's arguments, the job's own `rank` argument).
Each rank records where its rank was read (`ProcessInfo.rank_source`).

A rank is a Python process. The programs a launcher may run it under carry its environment
too and are walked through: a shell (`torchrun --no-python wrap.sh`, `bash -c 'python train.py;
echo done'`, a `| tee` pipeline), `timeout`, conda's `run` (`env`, `nice`, `numactl`, `taskset`
and `stdbuf` exec the next program and leave no process of their own). The rank is the Python
process below them; they are kept as its `wrappers`, the last its parent. A wrapper whose Python
has not started yet is no rank: the next discovery reads it again.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from hangdoc.collect.procfs import ProcDenied, ProcFS, ProcGone
from hangdoc.collect.spawned import RankClue, StackRanks, is_worker
from hangdoc.base.errors import NoSuchProcess, NotDistributed, NotPython, ProcessNotReadable
from hangdoc.base.parse import to_int
from hangdoc.model import Job, ProcessInfo, Role, Wrapper
from hangdoc.base.redact import filter_env, redact_cmdline, redact_text

# More forked Python children than this under one rank are not a DataLoader's workers (torch warns
# past the cores; 64 is more than any loader asks): the rest are its other children, their stacks
# not read as workers' every round (500 forks of a rank took 19 s under --once, read as 500 workers).
MAX_WORKERS_PER_RANK = 64
_RANK_VARS = (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
              ("PMI_RANK", "PMI_SIZE"))


def rank_identity(env: dict[str, str]) -> tuple[int, int] | None:
    """(rank, world size) from an environment, or None when it names no rank."""
    found = _identity(env)
    return found[:2] if found else None


def rank_source(env: dict[str, str]) -> str | None:
    """Which variable named the rank ("env RANK", ...), None when none did."""
    found = _identity(env)
    return found[2] if found else None


def _identity(env: dict[str, str]) -> tuple[int, int, str] | None:
    for rank_var, size_var in _RANK_VARS:
        rank, size = to_int(env.get(rank_var)), to_int(env.get(size_var))
        if rank is not None and size is not None:
            return rank, size, f"env {rank_var}"
    # Lightning's launcher starts ranks > 0 with LOCAL_RANK, NODE_RANK and WORLD_SIZE (no RANK);
    # on node 0 the global rank is the local one.
    local, size = to_int(env.get("LOCAL_RANK")), to_int(env.get("WORLD_SIZE"))
    if local is not None and size is not None and env.get("NODE_RANK") == "0":
        return local, size, _LIGHTNING
    return None


_LIGHTNING = "env LOCAL_RANK (Lightning's launcher, node 0)"


def start_method(cmdline: tuple[str, ...], parent_cmdline: tuple[str, ...]) -> str | None:
    """How a Python child was made: "spawn", "forkserver" or "fork" (same command line)."""
    joined = " ".join(cmdline)
    if "multiprocessing.forkserver" in joined:
        return "forkserver"
    if "spawn_main" in joined or "multiprocessing.spawn" in joined:
        return "spawn"
    if cmdline and cmdline == parent_cmdline:
        return "fork"
    return None


def is_python(cmdline: tuple[str, ...], exe: str | None) -> bool:
    names = [exe or ""] + list(cmdline[:1])
    return any("python" in name.rsplit("/", 1)[-1] for name in names)


def is_wrapper(cmdline: tuple[str, ...], exe: str | None) -> bool:
    """A program that runs the job's Python below it: any process that is not Python (a shell,
    `timeout`), and conda's `run` (a Python program). A process whose command line cannot be read
    (a zombie, another user's) is not known to wrap anything."""
    if not cmdline:
        return False
    if not is_python(cmdline, exe):
        return True
    words = [word.rsplit("/", 1)[-1] for word in cmdline[:4]]
    return any(name in ("conda", "mamba") and "run" in words[at + 1:at + 2]
               for at, name in enumerate(words))


@dataclass
class _Table:
    """ppid links of every process on the node, read once per discovery."""

    procfs: ProcFS
    known: dict[int, ProcessInfo] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.parent: dict[int, int] = {}
        self.children: dict[int, list[int]] = {}
        self._env: dict[int, dict[str, str]] = {}
        self._wraps: dict[int, bool] = {}
        for pid in self.procfs.pids():
            try:
                st = self.procfs.stat(pid)
            except (ProcGone, ProcDenied, ValueError, IndexError):
                continue
            self.parent[pid] = st.ppid
            self.children.setdefault(st.ppid, []).append(pid)
            seen = self.known.get(pid)
            if seen is not None and seen.start_time == st.start_time:
                # Found before (the same process, not a reused pid): its kept environment still
                # names its rank, so a re-discovery reads no environment it has read already.
                self._env[pid] = dict(seen.env)
                self._wraps[pid] = (seen.role is not Role.RANK and rank_identity(seen.env) is not None
                                    and is_wrapper(seen.cmdline, seen.exe))

    def env(self, pid: int) -> dict[str, str]:
        if pid not in self._env:
            try:
                self._env[pid] = self.procfs.environ(pid)
            except (ProcGone, ProcDenied):
                self._env[pid] = {}
        return self._env[pid]

    def is_rank_carrier(self, pid: int) -> bool:
        return rank_identity(self.env(pid)) is not None

    def descendants(self, pid: int) -> list[int]:
        out, todo = [], list(self.children.get(pid, ()))
        while todo:
            child = todo.pop()
            out.append(child)
            todo.extend(self.children.get(child, ()))
        return out

    def wraps(self, pid: int) -> bool:
        """The process carries a rank's environment but is no Python rank: it runs one below it."""
        if pid not in self._wraps:
            self._wraps[pid] = self.is_rank_carrier(pid) and is_wrapper(
                self.procfs.cmdline_or_empty(pid), self.procfs.exe(pid))
        return self._wraps[pid]

    def is_rank(self, pid: int) -> bool:
        """The topmost Python process that carries a rank, wrappers above it walked through."""
        return self.is_rank_carrier(pid) and not self.wraps(pid) and self.wrappers(pid) is not None

    def wrappers(self, pid: int) -> list[int] | None:
        """The carriers above `pid` up to the first that carries no rank, outermost first, when
        every one of them is a wrapper; None when one is not (`pid` is a rank's worker or child)."""
        chain, up = [], self.parent.get(pid, 0)
        while up > 1 and self.is_rank_carrier(up):
            if not self.wraps(up) or len(chain) >= _MAX_WRAPPERS:
                return None
            chain.append(up)
            up = self.parent.get(up, 0)
        return chain[::-1]

    def head(self, pid: int) -> int:
        """The rank's outermost wrapper, or the rank itself: what its launcher started."""
        chain = self.wrappers(pid)
        return chain[0] if chain else pid


_MAX_WRAPPERS = 8      # wrappers over one rank; a deeper chain of carriers is not a launch


def find_job(pid: int, procfs: ProcFS | None = None, single: bool = False,
             known: dict[int, ProcessInfo] | None = None,
             stack_ranks: Callable[[int, float | None], object] | None = None) -> Job:
    """The job `pid` belongs to. Raises a HangdocError the user can act on when there is none.

    `known` holds processes found earlier: they are not read again (a watch re-discovers often).
    `stack_ranks` reads a rank from a process's stack where no environment names it (default:
    py-spy `--locals`, `collect/spawned.py`).
    """
    known = known or {}
    procfs = procfs or ProcFS()
    if not procfs.exists(pid):
        raise NoSuchProcess(pid)
    table = _Table(procfs, known)
    if pid not in table.parent:
        raise NoSuchProcess(pid)
    try:
        table._env[pid] = procfs.environ(pid)
    except ProcDenied:
        raise ProcessNotReadable(pid) from None
    except ProcGone:
        raise NoSuchProcess(pid) from None

    rank_pids: list[int]
    launcher: int | None = None
    if table.is_rank_carrier(pid):
        top = pid
        while table.is_rank_carrier(table.parent.get(top, 0)):
            top = table.parent[top]
        up, rank = pid, None                  # the rank itself, or a worker's rank
        while rank is None and up > 1 and table.is_rank_carrier(up):
            rank = up if table.is_rank(up) else None
            up = table.parent.get(up, 0)
        # a wrapper: the ranks below it (none while its Python has not started)
        ranks = [rank] if rank is not None else _ranks_below(table, top)
        launcher = launcher_of(table, ranks[0]) if ranks else None
        rank_pids = _ranks_below(table, launcher) if launcher is not None else ranks
        if not rank_pids and table.wraps(pid):
            raise NotDistributed(pid, "it runs a rank's program (a shell, `timeout`, ...) whose Python "
                                      "process has not started yet")
    else:
        rank_pids = _ranks_below(table, pid)
        if rank_pids:
            parents = {table.parent[r] for r in rank_pids}
            launcher = pid if pid in parents or len(parents) != 1 else parents.pop()
    if not rank_pids:           # a worker of Lightning's rank 0: the ranks are below an ancestor
        up = table.parent.get(pid, 0)
        for _ in range(4):
            if up <= 1:
                break
            below = _ranks_below(table, up)
            if below and _lightning_root(table, below) == up:
                rank_pids = below
                break
            up = table.parent.get(up, 0)
    clues: dict[int, RankClue] = {}
    root = _lightning_root(table, rank_pids)
    if root is not None:        # Lightning's script process: rank 0, and the parent of the others
        launcher, rank_pids = None, [root] + [r for r in rank_pids if r != root]
        size = rank_identity(table.env(rank_pids[-1]))[1]
        clues[root] = RankClue(0, size, "Lightning's launcher: the script's own process is rank 0")
    if not rank_pids:           # even with --single: mp.spawn's ranks may show their ranks late
        launcher, clues = _spawned(table, pid, known, stack_ranks or StackRanks())
        rank_pids = sorted(clues)
    if not rank_pids:
        cmdline, exe = procfs.cmdline_or_empty(pid), procfs.exe(pid)
        if not is_python(cmdline, exe):
            raise NotPython(pid, exe or (cmdline[0] if cmdline else "?"))
        if not single:
            raise NotDistributed(pid)
        rank_pids = [pid]

    infos: list[ProcessInfo] = []
    if launcher is not None:
        info = known.get(launcher) or _info(procfs, table, launcher, Role.LAUNCHER)
        if info:
            infos.append(info)
    others = set(rank_pids)
    for rank_pid in rank_pids:
        info = known.get(rank_pid) or _info(procfs, table, rank_pid, Role.RANK, clue=clues.get(rank_pid))
        if info is None:
            continue
        infos.append(info)
        workers = 0
        for child in sorted(_own_descendants(table, rank_pid, others)):
            child_info = known.get(child) or _info(procfs, table, child, Role.CHILD, rank_info=info)
            if child_info and child_info.role is Role.WORKER:
                workers += 1
                if workers > MAX_WORKERS_PER_RANK:    # more than any DataLoader: forks of the rank's own
                    child_info = dataclasses.replace(child_info, role=Role.CHILD)
            if child_info:
                infos.append(child_info)

    first_env = table.env(rank_pids[0])
    identity = job_identity(first_env)
    clue = clues.get(rank_pids[0])
    if clue is not None and identity["world_size"] is None:
        identity.update(world_size=clue.world_size or len(rank_pids),
                        master_addr=identity["master_addr"] or clue.master_addr,
                        master_port=identity["master_port"] or clue.master_port)
    return Job(
        **identity,
        launcher_pid=launcher,
        processes=tuple(infos),
        single_process=single and rank_identity(first_env) is None and not clues,
    )


def _own_descendants(table: "_Table", rank_pid: int, ranks: set[int]) -> list[int]:
    """The rank's descendants, without another rank's tree (Lightning's rank 0 is the others' parent)."""
    out, todo = [], [c for c in table.children.get(rank_pid, ()) if c not in ranks]
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(c for c in table.children.get(child, ()) if c not in ranks)
    return out


def _lightning_root(table: "_Table", rank_pids: list[int]) -> int | None:
    """The script process of Lightning's own launcher: the Python parent of ranks that only
    LOCAL_RANK names (it is rank 0, with no rank variable in the environment it started with)."""
    if not rank_pids or any(rank_source(table.env(r)) != _LIGHTNING for r in rank_pids):
        return None
    parents = {table.parent.get(r, 0) for r in rank_pids}
    if len(parents) != 1:
        return None
    parent = parents.pop()
    if parent <= 1 or table.is_rank_carrier(parent):
        return None
    ranks = {rank_identity(table.env(r))[0] for r in rank_pids}
    cmdline = table.procfs.cmdline_or_empty(parent)
    return parent if 0 not in ranks and is_python(cmdline, None) else None


def _spawned(table: "_Table", pid: int, known: dict[int, ProcessInfo],
             stack_ranks: Callable[[int, float | None], object]) -> tuple[int | None, dict[int, RankClue]]:
    """(launcher, rank pid -> clue) of a job whose ranks are a script's multiprocessing children
    (torch.multiprocessing.spawn, multiprocessing.Process), read from their stacks; ({}) for none.
    The launcher is the first process up from `pid` that is no multiprocessing child itself."""
    launcher = pid
    for _ in range(8):
        parent = table.parent.get(launcher, 0)
        if parent <= 1 or not _mp_child(table, launcher, parent):
            break
        launcher = parent
    clues: dict[int, RankClue] = {}
    unread: list[int] = []
    for child in sorted(table.children.get(launcher, ())):
        if not _mp_child(table, child, launcher):
            continue
        seen = known.get(child)
        if seen is not None and seen.role is Role.RANK and seen.rank is not None:
            clues[child] = RankClue(seen.rank, seen.world_size, seen.rank_source or "its stack")
            continue
        try:
            started = table.procfs.stat(child).start_time
        except (ProcGone, ProcDenied, ValueError, IndexError):
            continue
        clue = stack_ranks(child, started)
        if isinstance(clue, RankClue) and not is_worker(clue):
            clues[child] = clue
        elif clue is None:
            unread.append(child)
    # One child whose stack said nothing (stopped, or a stack py-spy could not read) beside ranks that
    # leave one rank of the world size unclaimed: that rank is it (a stopped rank is a culprit to name).
    size = max((c.world_size for c in clues.values() if c.world_size), default=None)
    missing = sorted(set(range(size)) - {c.rank for c in clues.values()}) if size else []
    if len(unread) == 1 and len(missing) == 1:
        clues[unread[0]] = RankClue(missing[0], size, f"the one rank of {size} its siblings' stacks leave unclaimed "
                                                      "(its own stack could not be read)")
    return (launcher if clues else None), clues


def wraps_a_rank(pid: int, procfs: ProcFS) -> bool:
    """Whether `pid` is a program that runs a rank's Python below it (a shell, `timeout`), whose
    Python may not have started yet."""
    return _Table(procfs).wraps(pid)


def spawns_children(pid: int, procfs: ProcFS) -> bool:
    """Whether `pid` has Python children made by multiprocessing: ranks of torch.multiprocessing.spawn
    still starting, perhaps (their stacks say so once they run the job's function)."""
    table = _Table(procfs)
    return any(_mp_child(table, child, pid) for child in table.children.get(pid, ()))


def _mp_child(table: "_Table", pid: int, parent: int) -> bool:
    """A Python process made by multiprocessing (spawned, forked or by a forkserver), not its helper."""
    cmdline = table.procfs.cmdline_or_empty(pid)
    return (is_python(cmdline, None) and start_method(cmdline, table.procfs.cmdline_or_empty(parent)) is not None
            and "resource_tracker" not in " ".join(cmdline))


def job_identity(env: dict[str, str]) -> dict:
    """What tells one job from another, read from a rank's environment."""
    identity = rank_identity(env)
    return {"run_id": env.get("TORCHELASTIC_RUN_ID"), "master_addr": env.get("MASTER_ADDR"),
            "master_port": to_int(env.get("MASTER_PORT")), "world_size": identity[1] if identity else None}


def local_rank_of(env: dict[str, str]) -> int | None:
    return to_int(env.get("LOCAL_RANK") or env.get("OMPI_COMM_WORLD_LOCAL_RANK"))


def launcher_of(table: "_Table", rank_pid: int) -> int | None:
    """The rank's parent (its outermost wrapper's) when it started the job: it has other ranks below
    it or is a known launcher."""
    parent = table.parent.get(table.head(rank_pid), 0)
    if parent <= 1:
        return None
    if looks_like_launcher(table.procfs, parent):
        return parent
    siblings = [p for p in table.descendants(parent)
                if table.is_rank(p) and table.parent.get(table.head(p), 0) == parent]
    return parent if len(siblings) > 1 else None


def looks_like_launcher(procfs: ProcFS, pid: int) -> bool:
    words = " ".join(procfs.cmdline_or_empty(pid))
    return any(name in words for name in (
        "torchrun", "torch.distributed.run", "torch.distributed.launch", "deepspeed",
        "accelerate", "mpirun", "mpiexec", "orted", "prterun", "slurmstepd", "srun",
    ))


def _ranks_below(table: _Table, pid: int) -> list[int]:
    return sorted(p for p in table.descendants(pid) if table.is_rank(p))


def _info(procfs: ProcFS, table: _Table, pid: int, role: Role,
          rank_info: ProcessInfo | None = None, clue: RankClue | None = None) -> ProcessInfo | None:
    try:
        st = procfs.stat(pid)
        cmdline = procfs.cmdline(pid)
    except (ProcGone, ProcDenied):
        return None
    env = table.env(pid)
    exe = procfs.exe(pid)
    identity = rank_identity(env)
    source = rank_source(env) if role is Role.RANK else None
    if clue is not None and identity is None:
        identity, source = (clue.rank, clue.world_size), clue.source
    method = None
    if rank_info is not None:
        parent_cmdline = procfs.cmdline_or_empty(st.ppid)
        method = start_method(cmdline, parent_cmdline)
    try:
        if role is Role.LAUNCHER:
            libs: tuple[str, ...] = ()
        elif method == "fork" and rank_info is not None and st.ppid == rank_info.pid:
            libs = rank_info.libs   # a forked child maps what its parent mapped
        else:
            libs = procfs.interesting_libs(pid)
    except (ProcGone, ProcDenied):
        libs = ()
    # A Python child made by multiprocessing may be a DataLoader worker; its stack decides.
    if method and is_python(cmdline, exe) and "resource_tracker" not in " ".join(cmdline):
        role = Role.WORKER
    wrappers = tuple(Wrapper(w, redact_cmdline(procfs.cmdline_or_empty(w)))
                     for w in table.wrappers(pid) or ()) if role is Role.RANK else ()
    return ProcessInfo(
        pid=pid,
        ppid=st.ppid,
        role=role,
        cmdline=redact_cmdline(cmdline),
        exe=redact_text(exe) if exe else exe,
        start_time=st.start_time,
        env=filter_env(env),
        rank=identity[0] if identity else None,
        local_rank=local_rank_of(env),
        group_rank=to_int(env.get("GROUP_RANK")),
        world_size=identity[1] if identity else None,
        rank_pid=rank_info.pid if rank_info else (pid if role is Role.RANK else None),
        start_method=method,
        libs=libs,
        rank_source=source,
        wrappers=wrappers,
    )
