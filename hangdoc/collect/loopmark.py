"""The job's own position in its loop, read from the locals `py-spy dump --locals` prints.

A rank waiting in a collective is caught on the same line step after step; what tells
a new step from the old one is the job's own state: its integer counters (`step`,
`batch_idx`, `epoch`) and the identities of its other locals (a new `batch` object every
step). Only digests of identities and the integers themselves leave this module: the
reprs of strings and containers, where secrets live, are read and dropped here.
"""
from __future__ import annotations

import hashlib
import re

from hangdoc.base.redact import redact_cached, secret_name
from hangdoc.model import FrameMark, LoopMark, is_job_file

MAX_FRAMES = 24
MAX_COUNTERS = 16          # per frame
_INT = re.compile(r"-?\d{1,18}")
# How py-spy prints a c10d collective's handle, or the Future it gives: its type's name.
_WORK = re.compile(r"<torch\._C\.(_distributed_c10d\.(Work|FakeWork)|Future)\b")
MAX_VALUES = 12            # shown values per frame
# The values a local may show (never a string's or a container's repr): a flag, None, a number
# with a point, and an exception's type, as py-spy prints an object of it.
_SHOWN = re.compile(r"True|False|None|-?(?:\d{1,12}\.\d{0,8}(?:e[-+]?\d{1,3})?|nan|inf)")
_EXCEPTION = re.compile(r"<([A-Za-z_][\w.]{0,60}(?:Error|Exception|Exit|Interrupt|Timeout|Warning)) at 0x[0-9a-f]+>")


def frame_mark(frame: dict) -> FrameMark:
    digest = hashlib.blake2b(digest_size=8)
    counters: list[tuple[str, int]] = []
    work = False
    values: list[tuple[str, str]] = []
    for local in frame.get("locals") or ():
        name = str(local.get("name") or "?")
        text = local.get("repr")
        if secret_name(name):
            continue      # an integer named like a secret (`secret_pin`) is a secret, not a counter
        if isinstance(text, str) and _INT.fullmatch(text):
            if len(counters) < MAX_COUNTERS:
                counters.append((name, int(text)))
        else:
            digest.update(f"{name}@{local.get('addr')}\0".encode())
            work = work or (isinstance(text, str) and _WORK.match(text) is not None)
            shown = _shown(text)
            if shown is not None and len(values) < MAX_VALUES:
                values.append((redact_cached(name), shown))
    return FrameMark(function=redact_cached(frame.get("name") or "?"), line=int(frame.get("line") or 0),
                     digest=digest.hexdigest(), counters=tuple(counters), holds_work=work,
                     values=tuple(values))


def _shown(text: object) -> str | None:
    """The value a local may show, or None: its type's name for an exception it holds."""
    if not isinstance(text, str):
        return None
    if _SHOWN.fullmatch(text):
        return text
    raised = _EXCEPTION.fullmatch(text)
    return raised.group(1) if raised else None


def loop_mark(frames: list[dict]) -> LoopMark | None:
    """The LoopMark of one thread from py-spy's frames (innermost first); None when no frame
    of the job's own code carries locals (py-spy read none, or only library code runs)."""
    job = [f for f in reversed(frames)
           if is_job_file(f.get("filename") or "") and f.get("locals") is not None]
    if not job:
        return None
    return LoopMark(frames=tuple(frame_mark(f) for f in job[:MAX_FRAMES]))
