"""The job's own source at the lines its ranks stand at: each line's text and an outline of the
function around it (loops, branches, `try` blocks and handlers, the jumps out of them).

Read from the file as the rank sees it (`/proc/PID/root/...`), bounded in size, parsed once per
file version and remembered; the texts kept are redacted. Nothing is written and the job is not
touched: only files its frames name are opened, for reading.
"""
from __future__ import annotations

import ast
import os
import stat
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from hangdoc.base.redact import redact_cached
from hangdoc.model import Job, Snapshot, SourceBlock, SourceFunction

MAX_FILE_BYTES = 2 * 1024 * 1024    # a file larger than this is not read
MAX_FUNCTIONS = 48                  # outlined per bundle
MAX_BLOCKS = 400                    # per function
MAX_TEXT = 160                      # characters of a line kept
_CACHED_FILES = 32

_Parsed = tuple[list[str], ast.Module]
_files: OrderedDict[tuple, _Parsed | None] = OrderedDict()
# Outlines already made, by (file version, function, lines): a watch asks for the same ones every
# round, and walking a large file's tree again costs milliseconds each time.
_outlined: OrderedDict[tuple, SourceFunction | None] = OrderedDict()
_CACHED_OUTLINES = 256


def read_sources(job: Job, samples: tuple[Snapshot, ...], proc_root: str | Path = "/proc") -> tuple[SourceFunction, ...]:
    """The outlines of the job's own functions the ranks' main threads stand in at the last sample."""
    if not samples:
        return ()
    wanted: dict[tuple[str, str], set[int]] = {}
    pids: dict[str, int] = {}
    ranks = {p.pid for p in job.ranks}
    for sample in samples[-1].processes:
        if sample.pid not in ranks or sample.stack is None or sample.stack.main is None:
            continue
        for frame in sample.stack.main.frames:
            if not frame.is_job_code:
                continue
            wanted.setdefault((frame.filename, frame.name), set()).add(frame.line)
            pids.setdefault(frame.filename, sample.pid)
    functions: list[SourceFunction] = []
    for (filename, name), lines in list(wanted.items())[:MAX_FUNCTIONS]:
        found = _parsed(filename, pids[filename], Path(proc_root))
        if found is None or found[1] is None:
            continue
        key = (found[0], filename, name, tuple(sorted(lines)))
        if key in _outlined:
            _outlined.move_to_end(key)
        else:
            _outlined[key] = outline_of(found[1], filename, name, list(key[3]))
            while len(_outlined) > _CACHED_OUTLINES:
                _outlined.popitem(last=False)
        outline = _outlined[key]
        if outline is not None:
            functions.append(outline)
    return tuple(functions)


def outline_source(text: str, filename: str, name: str, lines: Iterable[int]) -> SourceFunction | None:
    """The outline of the function `name` holding `lines` in the source `text` (None: unparsable)."""
    try:
        parsed = (text.splitlines(), ast.parse(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return outline_of(parsed, filename, name, sorted(lines))


def outline_of(parsed: _Parsed, filename: str, name: str, lines: list[int]) -> SourceFunction | None:
    texts, tree = parsed
    if not lines:
        return None
    scope = _innermost_def(tree, lines[0])
    if scope is None:
        body, first, last = tree.body, 1, len(texts)
    else:
        body, first, last = scope.body, scope.lineno, scope.end_lineno or scope.lineno
    blocks: list[SourceBlock] = []
    _walk(body, texts, blocks)
    own = tuple((n, _text(texts, n)) for n in lines if first <= n <= last)
    return SourceFunction(filename=filename, name=name, line=first, end=last, blocks=tuple(blocks), lines=own)


def _parsed(filename: str, pid: int, proc_root: Path) -> tuple[tuple, _Parsed | None] | None:
    """(the file version's key, its lines and tree) as the rank sees it; None: no regular file."""
    for path in (proc_root / str(pid) / "root" / filename.lstrip("/"), Path(filename)):
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            continue
        if not stat.S_ISREG(info.st_mode):
            return None      # a FIFO or a device under a .py name: never opened
        key = (str(path), info.st_mtime_ns, info.st_size)
        if key in _files:
            _files.move_to_end(key)
            return key, _files[key]
        parsed = _read(path, info.st_size)
        _files[key] = parsed
        while len(_files) > _CACHED_FILES:
            _files.popitem(last=False)
        return key, parsed
    return None


def _read(path: Path, size: int) -> _Parsed | None:
    if size > MAX_FILE_BYTES:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            return None
        text = data.decode("utf-8", errors="replace")
        return text.splitlines(), ast.parse(text)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _innermost_def(tree: ast.AST, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found


def _text(texts: list[str], line: int) -> str:
    raw = texts[line - 1].strip() if 0 < line <= len(texts) else ""
    if "  #" in raw:
        raw = raw.split("  #", 1)[0].rstrip()     # the line's trailing comment
    return redact_cached(raw[:MAX_TEXT])


def _end(nodes: list[ast.stmt]) -> int:
    return max((n.end_lineno or n.lineno) for n in nodes)


def _add(blocks: list[SourceBlock], kind: str, line: int, end: int, texts: list[str], text: str | None = None) -> None:
    if len(blocks) < MAX_BLOCKS:
        blocks.append(SourceBlock(kind, line, end, text if text is not None else _text(texts, line)))


def _walk(body: list[ast.stmt], texts: list[str], blocks: list[SourceBlock]) -> None:
    """The compound statements and jumps of `body`, in source order, not inside nested functions
    or classes (their code runs elsewhere)."""
    for node in body:
        if len(blocks) >= MAX_BLOCKS:
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            _add(blocks, "while" if isinstance(node, ast.While) else "for", node.lineno, _end(node.body), texts)
            _walk(node.body, texts, blocks)
            if node.orelse:
                _add(blocks, "else", node.orelse[0].lineno, _end(node.orelse), texts, "else:")
                _walk(node.orelse, texts, blocks)
        elif isinstance(node, ast.If):
            _add(blocks, "if", node.lineno, _end(node.body), texts)
            _walk(node.body, texts, blocks)
            if node.orelse:
                elif_ = len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) and \
                    _text(texts, node.orelse[0].lineno).startswith("elif")
                if not elif_:
                    _add(blocks, "else", node.orelse[0].lineno, _end(node.orelse), texts, "else:")
                _walk(node.orelse, texts, blocks)
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            _add(blocks, "try", node.lineno, _end(node.body), texts)
            _walk(node.body, texts, blocks)
            for handler in node.handlers:
                _add(blocks, "except", handler.lineno, handler.end_lineno or handler.lineno, texts)
                _walk(handler.body, texts, blocks)
            if node.orelse:
                _add(blocks, "else", node.orelse[0].lineno, _end(node.orelse), texts, "else:")
                _walk(node.orelse, texts, blocks)
            if node.finalbody:
                _add(blocks, "finally", node.finalbody[0].lineno, _end(node.finalbody), texts, "finally:")
                _walk(node.finalbody, texts, blocks)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            _add(blocks, "with", node.lineno, _end(node.body), texts)
            _walk(node.body, texts, blocks)
        elif isinstance(node, ast.Return):
            _add(blocks, "return", node.lineno, node.end_lineno or node.lineno, texts)
        elif isinstance(node, ast.Break):
            _add(blocks, "break", node.lineno, node.lineno, texts)
        elif isinstance(node, ast.Continue):
            _add(blocks, "continue", node.lineno, node.lineno, texts)
        elif isinstance(node, ast.Raise):
            _add(blocks, "raise", node.lineno, node.end_lineno or node.lineno, texts)
