"""The real probes a watch reads the job through: /proc, a stack engine, NVML when asked for."""
from __future__ import annotations

from hangdoc.base.errors import PtraceDenied, PyStackMissing, PySpyMissing
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.snapshot import Probes
from hangdoc.collect.stacks import PySpy, find_py_spy
from hangdoc.live.options import WatchOptions
from hangdoc.model import Engine, Job, Role, Snapshot


def make_probes(options: WatchOptions = WatchOptions(), proc_root: str = "/proc", timeout_s: float = 5.0) -> Probes:
    """The real probes: /proc, a stack engine, NVML when asked for.

    `options.engine`: "py-spy" (found, or the binary named), "pystack" (in-process, the fallback),
    "auto": py-spy when it is installed, else pystack when that is."""
    probes = Probes(procfs=ProcFS(proc_root), pyspy=stack_engine(options.engine, options.py_spy, timeout_s))
    if options.gpu:
        from hangdoc.collect.gpu import open_nvml

        probes.gpu = open_nvml().sample
    return probes


def stack_engine(engine: Engine | str, py_spy: str | None = None, timeout_s: float = 5.0):
    from hangdoc.collect import pystack_engine

    engine = Engine(engine)
    if engine is not Engine.PYSTACK:
        try:
            return PySpy(find_py_spy(py_spy), timeout_s=timeout_s)
        except PySpyMissing:
            if engine is not Engine.AUTO or py_spy or not pystack_engine.available():
                raise
    if not pystack_engine.available():
        raise PyStackMissing()
    return pystack_engine.PyStack()


def engine_name(reader) -> str:
    """What a bundle's options record of the stack engine."""
    return getattr(reader, "name", "py-spy")


def require_stacks(snapshot: Snapshot, job: Job) -> None:
    """Every stack refused for lack of ptrace rights: no diagnosis is possible, say how to fix it."""
    ranks = {p.pid for p in job.by_role(Role.RANK)}
    denied = [s for s in snapshot.processes if s.pid in ranks and s.stack is None
              and any("ptrace" in e.lower() or "permission denied" in e.lower()
                      or "operation not permitted" in e.lower() for e in s.errors)]
    if ranks and len(denied) == len(ranks):
        raise PtraceDenied(denied[0].pid, denied[0].errors[-1].split(": ", 2)[-1][:120])


