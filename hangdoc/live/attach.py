"""Attaching as users do: `torchrun ... & hangdoc watch $!` runs before the launcher has started
its ranks. A launcher with no rank yet is waited for, not refused; so is a script whose
multiprocessing children (torch.multiprocessing.spawn's ranks) have not shown their ranks yet, and
a rank's wrapper (a shell, `timeout`) whose Python has not started yet."""
from __future__ import annotations

import time
from typing import Callable

from hangdoc.base.errors import NotDistributed
from hangdoc.collect.discover import find_job, looks_like_launcher, spawns_children, wraps_a_rank
from hangdoc.collect.procfs import ProcFS
from hangdoc.model import Job

# How long a launcher may take to start its ranks: torch's import alone takes 5-20 s on a busy node.
RANKS_PATIENCE_S = 120.0
POLL_S = 0.2


def find_job_waiting(pid: int, procfs: ProcFS, *, single: bool = False, patience_s: float = RANKS_PATIENCE_S,
                     notify: Callable[[str], None] = lambda line: None,
                     sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.monotonic) -> Job:
    """The job of `pid`; when `pid` is a launcher (torchrun, deepspeed, ...) whose ranks do not exist
    yet, wait up to `patience_s` for them (saying so once). Any other refusal is raised at once."""
    began = clock()
    said = False
    while True:
        try:
            return find_job(pid, procfs, single=single)
        except NotDistributed:
            if single or not (looks_like_launcher(procfs, pid) or spawns_children(pid, procfs)
                              or wraps_a_rank(pid, procfs)):
                raise
            waited = clock() - began
            if waited >= patience_s:
                raise NotDistributed(pid, f"the launcher started no rank in {patience_s:g} s") from None
            if not said:
                notify(f"pid {pid} is a launcher with no rank yet; waiting up to {patience_s:g} s for its ranks")
                said = True
            sleep(POLL_S)
