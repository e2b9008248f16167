"""What the lines PyTorch and torchrun print say: who failed first, which worker died and how."""
from __future__ import annotations

import re
from dataclasses import dataclass

from hangdoc.model import LogTail
from hangdoc.model.logline import EXITED_LINE, KILLED_LINE, RANK_PREFIX, killed_in_line, line_rank, worker_signal_in_line

_CAUGHT = re.compile(r"Caught (\w+) in DataLoader worker process (\d+)")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:\s*\(pid:\s*(\d+)\))?")
_FAILURE = ("ChildFailedError", "Traceback (most recent call last)", "is killed by signal",
            "exited unexpectedly", "Segmentation fault", "exitcode  :")


# A line that counts the training loop: "step 360", "Step: 12", "iter=7", "global_step 40", "epoch 2
# batch 17", or tqdm's "| 120/500 [". The last such number a job printed is its output's step.
_STEP_LINE = re.compile(r"\b(?:global_step|step|iter|iteration|batch|batch_idx)['\"]?\s*[=:#]?\s*(\d{1,12})\b"
                        r"|\|\s*(\d{1,12})/\d{1,12}\s*\[", re.IGNORECASE)


def output_step(logs: tuple[LogTail, ...]) -> int | None:
    """The largest of the step numbers each output source printed last (None: no such line)."""
    last = []
    for tail in logs:
        for line in reversed(tail.lines):
            found = _STEP_LINE.findall(line)
            if found:
                last.append(max(int(a or b) for a, b in found))
                break
    return max(last) if last else None


def output_steps(samples) -> tuple[float, ...]:
    """When the job's output printed a step beyond any it had printed before, sample by sample."""
    times, seen = [], None
    for snapshot in samples:
        step = snapshot.output_step
        if step is not None and seen is not None and step > seen:
            times.append(snapshot.time)
        if step is not None:
            seen = step if seen is None else max(seen, step)
    return tuple(times)


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
        for pid, how, told in killed_in_line(line):
            if told:
                out[pid] = how
            else:
                out.setdefault(pid, how)
    return out


def worker_signals(logs: tuple[LogTail, ...]) -> list[tuple[str, str]]:
    """(how, line) for each line a DataLoader worker wrote as a fatal signal killed it
    (`ERROR: Unexpected segmentation fault encountered in worker.`), in the order printed."""
    return [(how, line) for _, line in all_lines(logs) if (how := worker_signal_in_line(line))]


def failed_in_loader(logs: tuple[LogTail, ...]) -> list[int]:
    """The ranks whose last traceback (torchrun's `[rankN]:` lines) was raised within a DataLoader's
    iterator, in rank order: one pass over the output, whatever the number of ranks."""
    own: dict[int, list[str]] = {}
    for _, line in all_lines(logs):
        if (prefix := RANK_PREFIX.match(line)):
            own.setdefault(int(prefix.group(1)), []).append(line[prefix.end():])
    out = []
    for rank in sorted(own):
        blocks = _traceback_blocks(own[rank])
        if blocks and _raised_in_loader(blocks[-1]):
            out.append(rank)
    return out


def caught_in_worker(logs: tuple[LogTail, ...]) -> list[tuple[str, int, int]]:
    """(exception, worker index, line number in its tail) for `Caught X in DataLoader worker process N`."""
    found = []
    for tail in logs:
        for i, line in enumerate(tail.lines):
            if (m := _CAUGHT.search(line)):
                found.append((m.group(1), int(m.group(2)), i))
    return found


def failed_worker_rank(logs: tuple[LogTail, ...]) -> int | None:
    """The rank whose DataLoader worker died or raised, from the prefix of the line that says so."""
    for _, line in all_lines(logs):
        if KILLED_LINE.search(line) or EXITED_LINE.search(line) or _CAUGHT.search(line):
            rank = line_rank(line)
            if rank is not None:
                return rank
    return None


_LOADER_FILE = "torch/utils/data/dataloader.py"
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')
_TOP_LEVEL = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Fault)\b.*|^[A-Za-z_][\w.]*: .+")


@dataclass(frozen=True)
class RaisedError:
    """A Python exception a rank (or its DataLoader worker) printed: what, and where it was raised."""

    rank: int | None
    messages: tuple[str, ...]       # "KeyError: Caught KeyError in DataLoader worker process 0.", "KeyError: 'x'"
    where: str | None               # "rules_job.py:59 in resample": the innermost frame
    code: str | None                # that frame's source line
    in_loader: bool = False         # raised within a DataLoader's iterator (a frame of torch/utils/data/dataloader.py)


def _traceback_blocks(lines: list[str]) -> list[list[str]]:
    blocks: list[list[str]] = []
    for line in lines:
        if line.startswith("Traceback (most recent call last):"):
            blocks.append([])
        elif blocks:
            blocks[-1].append(line)
    return blocks


def rank_exception(logs: tuple[LogTail, ...], rank: int | None) -> RaisedError | None:
    """The last traceback the rank printed (torchrun's `[rankN]:` prefix), with the worker's
    original one folded in: the exception lines and the innermost frame. For a job without
    prefixes, the last traceback in the output that is not torchrun's own."""
    own: list[str] = []
    bare: list[str] = []
    for _, line in all_lines(logs):
        prefix = RANK_PREFIX.match(line)
        if prefix:
            if rank is None or int(prefix.group(1)) == rank:
                own.append(line[prefix.end():])
        else:
            bare.append(line)
    candidates = _traceback_blocks(own) or [b for b in _traceback_blocks(bare)
                                            if not any("ChildFailedError" in line for line in b)]
    if not candidates:
        return None
    block = candidates[-1]
    messages = tuple(line.strip() for line in block if _TOP_LEVEL.match(line) and not line.startswith(
        ("Original Traceback", "Traceback")))
    where = code = None
    for i, line in enumerate(block):
        if (m := _FRAME.match(line)):
            where = f"{m.group(1).rsplit('/', 1)[-1]}:{m.group(2)} in {m.group(3)}"
            following = block[i + 1].strip() if i + 1 < len(block) else ""
            code = following if following and not _FRAME.match(block[i + 1]) and not _TOP_LEVEL.match(following) else None
    if not messages:
        return None
    return RaisedError(rank, messages[-3:], where, code, _raised_in_loader(block))


def _raised_in_loader(block: list[str]) -> bool:
    """A traceback (its lines after the header) with a frame of a DataLoader's iterator."""
    return any((m := _FRAME.match(line)) and m.group(1).endswith(_LOADER_FILE) for line in block)
