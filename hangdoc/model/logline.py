"""The words of one line the job printed: the rank torchrun's prefix names, the line without it,
and the DataLoader workers the line says died. Pure functions of one line; what the job's output
says as a whole is worked out in `analyze/logs.py`."""
from __future__ import annotations

import re

# torchrun's per-rank line prefix; a NUL before it is the end of a DataLoader worker's dying words
# (WORKER_SIGNAL_LINE: it writes its message with its C string's terminator), in outputs kept whole.
RANK_PREFIX = re.compile(r"^\x00*\[(?:default)?rank(\d+)\]:\s?")
KILLED_LINE = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: (.+?)\.?\s*$")
EXITED_LINE = re.compile(r"DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly")
_WORKER_PID = "DataLoader worker (pid"     # what both lines begin with: most lines are let go at this test
# What a DataLoader worker's own signal handler writes as it dies of SIGSEGV, SIGBUS or SIGFPE
# (PyTorch's DataLoader.cpp), before the signal kills it: no pid, no rank prefix. Its rank says
# `is killed by signal` when it notices, unless it fails first another way (a batch cut off mid-handoff).
WORKER_SIGNAL_LINE = re.compile(r"ERROR: Unexpected (segmentation fault|bus error|floating-point exception) "
                                r"encountered in worker")
_SIGNAL_NAMES = {"segmentation fault": "Segmentation fault", "bus error": "Bus error",
                 "floating-point exception": "Floating point exception"}   # as strsignal(3) and the rank name them


def line_rank(line: str) -> int | None:
    """The rank torchrun's `[rankN]:` prefix names, if the line has one."""
    m = RANK_PREFIX.match(line)
    return int(m.group(1)) if m else None


def strip_rank(line: str) -> str:
    """The line without torchrun's `[rankN]:` prefix."""
    return RANK_PREFIX.sub("", line, count=1).rstrip()


def killed_in_line(line: str) -> tuple[tuple[int, str, bool], ...]:
    """(pid, how, told) for each worker one line says died: told is True for a signal named
    (`is killed by signal: X`), False for `exited unexpectedly`. A watch asks of the same
    hundreds of lines every round: the test for the words both lines hold comes first."""
    if _WORKER_PID not in line:
        return ()
    if (m := KILLED_LINE.search(line)):
        return ((int(m.group(1)), m.group(2), True),)
    if (m := EXITED_LINE.search(line)):
        return tuple((int(pid), "exited unexpectedly", False)
                     for pid in m.group(1).replace(" ", "").split(",") if pid.isdigit())
    return ()


def worker_signal_in_line(line: str) -> str | None:
    """The signal a DataLoader worker's own dying line names ("Segmentation fault"), if it is one."""
    if "encountered in worker" not in line:
        return None
    m = WORKER_SIGNAL_LINE.search(line)
    return _SIGNAL_NAMES[m.group(1)] if m else None
