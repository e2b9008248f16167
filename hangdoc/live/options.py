"""One options object for a watch, built once from the command line and passed down."""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.base.defaults import INTERVAL_S
from hangdoc.model import Engine, Options

# Every py-spy dump costs 12-16 ms of CPU (a process start, reading the interpreter's symbols,
# the threads' frames and locals): the workers of ranks that do not wait on their data, and the
# launcher, are read every WORKER_EVERY-th round only (30 s at the default interval), and of a
# rank that steps only one worker then, in turn (live/watcher.py).
WORKER_EVERY = 15


@dataclass(frozen=True)
class WatchOptions:
    """How `watch`, `run` and the scenarios sample a job: what to read, how often, for how long."""

    interval_s: float = INTERVAL_S
    hang_after_s: float | None = None      # None: learned from the job's step rhythm
    timeout_s: float | None = None
    native: bool = False                   # native (C/C++) frames too
    nonblocking: bool = False              # never pause a process to read its stack
    single: bool = False                   # a lone Python process, not a distributed job
    engine: Engine = Engine.AUTO
    py_spy: str | None = None              # the py-spy binary, when not the one on PATH
    gpu: bool = True                       # sample GPUs through NVML
    worker_every: int = WORKER_EVERY
    stop_when_slow: bool = False           # `watch`: end on a settled slow verdict (Judgement.settled_slow)

    def record(self, engine: str) -> Options:
        """What a bundle keeps of these options (`engine`: the stack engine that actually ran)."""
        return Options(interval_s=self.interval_s, hang_after_s=self.hang_after_s, native=self.native,
                       nonblocking=self.nonblocking, engine=engine)
