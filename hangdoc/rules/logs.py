"""The job's own output as evidence: a line without torchrun's rank prefix, the lines that hold a
needle, and the frames of the traceback above a line."""
from __future__ import annotations

import functools
import re

from hangdoc.model import LogTail
from hangdoc.model.logline import strip_rank


def find_lines(logs: tuple[LogTail, ...], *needles: str) -> list[tuple[LogTail, int]]:
    """(tail, index) of every log line holding one of `needles`. A tail whose text holds none of
    them is passed over whole: a watch asks of the same hundreds of lines every round."""
    return [(tail, i) for tail in logs if any(n in _text(tail.lines) for n in needles)
            for i, line in enumerate(tail.lines) if any(n in line for n in needles)]


@functools.lru_cache(maxsize=64)
def _text(lines: tuple[str, ...]) -> str:
    return "\n".join(lines)


def traceback_frames(lines: tuple[str, ...], end: int, limit: int = 4) -> list[str]:
    """The last `limit` `File "...", line N, in f` entries (with their source line) above `end`."""
    frames: list[str] = []
    i = end - 1
    while i >= 0 and len(frames) < limit:
        text = strip_rank(lines[i]).strip()
        if text.startswith("Traceback (most recent call last)") or text.startswith("Original Traceback"):
            break
        if text.startswith('File "'):
            source = strip_rank(lines[i + 1]).strip() if i + 1 < end else ""
            where = _short_file_line(text)
            frames.append(f"{where}: {source}" if source and not source.startswith(("^", "~")) else where)
        i -= 1
    return list(reversed(frames))


_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+), in (.+)$')


def _short_file_line(text: str) -> str:
    m = _FILE_LINE.match(text)
    if not m:
        return text
    path, line, func = m.groups()
    parts = path.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else path
    return f"{func} ({short}:{line})"
