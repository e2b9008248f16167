"""What the lines PyTorch and torchrun print say: who failed first, which worker died and how."""
from __future__ import annotations

import re
from dataclasses import dataclass

from hangdoc.model import LogTail

_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: (.+?)\.?\s*$")
_EXITED = re.compile(r"DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly")
_CAUGHT = re.compile(r"Caught (\w+) in DataLoader worker process (\d+)")
_RANK_PREFIX = re.compile(r"^\[(?:default)?rank(\d+)\]:\s?")   # torchrun's per-rank line prefix
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:\s*\(pid:\s*(\d+)\))?")
_FAILURE = ("ChildFailedError", "Traceback (most recent call last)", "is killed by signal",
            "exited unexpectedly", "Segmentation fault", "exitcode  :")


@dataclass(frozen=True)
class RootCause:
    rank: int
    exitcode: int | None
    pid: int | None


def all_lines(logs: tuple[LogTail, ...]):
    for tail in logs:
        for line in tail.lines:
            yield tail.source, line


def says_failure(logs: tuple[LogTail, ...]) -> bool:
    return any(marker in line for _, line in all_lines(logs) for marker in _FAILURE)


def torchrun_root_cause(logs: tuple[LogTail, ...]) -> RootCause | None:
    """torchrun's "Root Cause (first observed failure)" block: the rank that failed first."""
    for tail in logs:
        lines = tail.lines
        for i, line in enumerate(lines):
            if "Root Cause (first observed failure)" not in line:
                continue
            rank = exitcode = pid = None
            for follow in lines[i + 1:i + 12]:
                if (m := _ROOT_RANK.match(follow)):
                    rank = int(m.group(1))
                elif (m := _ROOT_EXIT.match(follow)):
                    exitcode = int(m.group(1))
                    pid = int(m.group(2)) if m.group(2) else None
            if rank is not None:
                return RootCause(rank, exitcode, pid)
    return None


def killed_workers(logs: tuple[LogTail, ...]) -> dict[int, str]:
    """pid -> how it died, from `DataLoader worker (pid N) is killed by signal: X`."""
    out: dict[int, str] = {}
    for _, line in all_lines(logs):
        if (m := _KILLED.search(line)):
            out[int(m.group(1))] = m.group(2)
        elif (m := _EXITED.search(line)):
            for pid in m.group(1).replace(" ", "").split(","):
                if pid.isdigit():
                    out.setdefault(int(pid), "exited unexpectedly")
    return out


def caught_in_worker(logs: tuple[LogTail, ...]) -> list[tuple[str, int, int]]:
    """(exception, worker index, line number in its tail) for `Caught X in DataLoader worker process N`."""
    found = []
    for tail in logs:
        for i, line in enumerate(tail.lines):
            if (m := _CAUGHT.search(line)):
                found.append((m.group(1), int(m.group(2)), i))
    return found


def line_rank(line: str) -> int | None:
    """The rank torchrun's `[rankN]:` prefix names, if the line has one."""
    m = _RANK_PREFIX.match(line)
    return int(m.group(1)) if m else None


def failed_worker_rank(logs: tuple[LogTail, ...]) -> int | None:
    """The rank whose DataLoader worker died or raised, from the prefix of the line that says so."""
    for _, line in all_lines(logs):
        if _KILLED.search(line) or _EXITED.search(line) or _CAUGHT.search(line):
            rank = line_rank(line)
            if rank is not None:
                return rank
    return None
