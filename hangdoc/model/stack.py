"""The stacks a capture reads: each thread's frames, and where the job's own loop stands.

py-spy (or pystack) prints them; `collect/` parses them into these frozen dataclasses, which a
`ProcSample` of the capture (`model/capture.py`) carries.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from hangdoc.base.symbols import symbol_name

# Frames that are never the job's loop: the standard library and the libraries a step calls into.
# Training frameworks (lightning, transformers, accelerate, deepspeed) count as the job's code:
# their loops carry the counters.
_LIBRARY_FILE = re.compile(
    r"/lib/python\d+(?:\.\d+)?/(?!site-packages/|dist-packages/)"
    r"|/(?:site|dist)-packages/(?:torch|torchaudio|torchvision|numpy|_pytest|pluggy)/"
)


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def is_job_file(filename: str) -> bool:
    """True for Python code of the job or its training framework (not stdlib, not torch itself)."""
    return filename.endswith(".py") and not filename.startswith("<") and not _LIBRARY_FILE.search(filename)


@dataclass(frozen=True)
class Frame:
    name: str                      # "all_reduce", "Queue.get"
    filename: str                  # absolute path as the job sees it
    short_filename: str            # "torch/distributed/distributed_c10d.py"
    line: int
    native: bool = False           # a C/C++ frame from `py-spy --native`

    @property
    def label(self) -> str:
        """How every format prints the frame: "Queue.get (multiprocessing/queues.py:113)"."""
        return f"{self.shown_name} ({self.short_filename}:{self.line})"

    @property
    def shown_name(self) -> str:
        """The name to print: a C++ frame's qualified function name, without the template
        arguments and parameter lists of its demangled symbol (`base/symbols.py`)."""
        return symbol_name(self.name) if self.native else self.name

    @property
    def symbol(self) -> str:
        """The name that is the same in every process: a native frame py-spy could not name is a
        bare address ("0x7f856ca2a1ca"), which address-space randomisation makes differ per process."""
        return "?" if self.native and _ADDRESS.fullmatch(self.name) else self.name

    @property
    def is_job_code(self) -> bool:
        return not self.native and is_job_file(self.filename)


@dataclass(frozen=True)
class FrameMark:
    """One frame of the job's own code, as its locals stood: a digest and the integers."""

    function: str                  # "main", "Trainer.fit_loop"
    line: int
    digest: str                    # digest of the identities (addresses) of its non-integer locals
    counters: tuple[tuple[str, int], ...] = ()   # its integer locals by name: ("step", 4812)
    # A local holding a collective's handle (c10d's `Work`, or its Future) that the frame waits on
    # (`while not w.is_completed(): pass`, `w.wait()`): a host waiting the NCCL way, in its own code.
    holds_work: bool = False
    # Its locals whose values can be shown: booleans, None, numbers with a point, and the type of an
    # exception a local holds ("UnicodeDecodeError"): what differs between ranks that parted ways.
    values: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LoopMark:
    """Where the job's own code stands, read from the locals `py-spy dump --locals` prints.

    Only digests and integers are kept: the reprs of strings and containers (where secrets
    live) never leave the parser. See hangdoc/analyze/progress.py for how two are compared.
    """

    frames: tuple[FrameMark, ...]  # the job's frames (not stdlib, not torch), OUTERMOST first

    @property
    def waits_on_work(self) -> bool:
        """The job's innermost frame holds a collective's Work: at that line it waits on it."""
        return bool(self.frames) and self.frames[-1].holds_work


@dataclass(frozen=True)
class Thread:
    tid: int                       # the kernel's thread id
    name: str
    active: bool                   # py-spy: running (not idle) at the instant of the dump
    owns_gil: bool
    frames: tuple[Frame, ...]      # innermost first, as py-spy prints them
    loop: LoopMark | None = None   # from --locals: the job's loop position (None: no locals read)

    @property
    def is_main(self) -> bool:
        return self.name == "MainThread"


@dataclass(frozen=True)
class Stack:
    threads: tuple[Thread, ...]
    native: bool = False
    took_s: float = 0.0
    # Read natively on hangdoc's own, once, to learn what a rank spinning at one line with its
    # counters still waits on (a CUDA sync, NCCL): its native frames say it; its Python frames
    # stand for the stack everywhere else (stack keys, classes, progress).
    probe: bool = False

    @property
    def main(self) -> Thread | None:
        for thread in self.threads:
            if thread.is_main:
                return thread
        return self.threads[0] if self.threads else None


T = TypeVar("T")
PER_STACK = 4096      # frame tuples remembered per function (a node's stacks of a whole watch fit)


def per_stack(read: Callable[[tuple[Frame, ...]], T]) -> Callable[[tuple[Frame, ...]], T]:
    """`read` (a function of a frames tuple alone) remembered per tuple, by identity. A decoded
    bundle shares one tuple among every process and sample standing at the same place, so a stack
    is walked once, not once per rank and sample (a 4,000-frame stack named by 2,000 ranks in two
    samples: over 120 s without, 10 s with). The tuple is held while remembered, so its id is not
    reused meanwhile."""
    seen: dict[int, tuple[tuple[Frame, ...], T]] = {}

    @functools.wraps(read)
    def cached(frames: tuple[Frame, ...]) -> T:
        hit = seen.get(id(frames))
        if hit is not None and hit[0] is frames:
            return hit[1]
        value = read(frames)
        if len(seen) >= PER_STACK:
            seen.clear()
        seen[id(frames)] = (frames, value)
        return value
    return cached


# Debuggers' own packages: their frames are never the user's line (pdb's stdlib files are not job code anyway).
DEBUGGER_PACKAGES = ("/ipdb/", "/pudb/", "/IPython/", "/prompt_toolkit/", "/pydevd", "/debugpy/")


@per_stack
def own_frame(frames: tuple[Frame, ...]) -> Frame | None:
    """The innermost frame of the job's own code (not the standard library's, not torch's, not a
    debugger's): the user's line a thread stands at."""
    return next((f for f in frames if f.is_job_code and not any(p in f.filename for p in DEBUGGER_PACKAGES)), None)


def signature(sample) -> tuple:
    """The main thread's stack as a comparable key: its frames, which compare by name, file and line.

    The frames tuple itself, not a copy: a key is built for every process in every sample
    (tens of thousands in a merged bundle) and compared only for a few."""
    main = sample.stack.main if sample is not None and sample.stack is not None else None
    if main is None:
        return ()
    if sample.stack.probe:       # a native probe's Python frames stand for its stack
        return tuple(f for f in main.frames if not f.native)
    return main.frames
