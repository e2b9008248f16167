"""The words of one line the job printed: the rank torchrun's prefix names, the line without it,
and the DataLoader workers the line says died. Pure functions of one line; what the job's output
says as a whole is worked out in `analyze/logs.py`."""
from __future__ import annotations

import re

RANK_PREFIX = re.compile(r"^\[(?:default)?rank(\d+)\]:\s?")   # torchrun's per-rank line prefix
KILLED_LINE = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: (.+?)\.?\s*$")
EXITED_LINE = re.compile(r"DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly")
_WORKER_PID = "DataLoader worker (pid"     # what both lines begin with: most lines are let go at this test


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
