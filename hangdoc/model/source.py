"""The job's own source around the lines its ranks stand at: the line's text and the outline of
the function it sits in (its loops, branches, `try` blocks and handlers, and the jumps out of
them), read from the file on disk by `collect/sources.py`. What `analyze/divergence.py` reads to
tell where one rank's path left the others'."""
from __future__ import annotations

from dataclasses import dataclass

# The kinds of a block of an outline: compound statements and the jumps out of them.
LOOPS = ("for", "while")
HANDLERS = ("except", "finally")
JUMPS = ("return", "break", "continue", "raise")


@dataclass(frozen=True)
class SourceBlock:
    """One statement of a function's outline: a compound statement's header, or a jump."""

    kind: str          # "for", "while", "if", "else", "try", "except", "finally", "with", or one of JUMPS
    line: int          # its first line
    end: int           # its last line (a header's block ends with its body)
    text: str          # the statement's first line as written, stripped (bounded, redacted)

    def holds(self, line: int) -> bool:
        return self.line <= line <= self.end


@dataclass(frozen=True)
class SourceFunction:
    """The outline of one function (or a module's top level, `<module>`) of the job's own code,
    with the text of the lines a rank stood at in it."""

    filename: str      # as the job sees it (the frames' filename)
    name: str          # the function's name, as py-spy names a frame's function (its last part)
    line: int
    end: int
    blocks: tuple[SourceBlock, ...] = ()     # in source order
    lines: tuple[tuple[int, str], ...] = ()  # (line, its text) for the lines asked about

    def holds(self, line: int) -> bool:
        return self.line <= line <= self.end

    def text_of(self, line: int) -> str | None:
        return next((text for number, text in self.lines if number == line), None)

    def around(self, line: int) -> tuple[SourceBlock, ...]:
        """The compound statements whose block holds `line`, outermost first."""
        return tuple(b for b in self.blocks if b.kind not in JUMPS and b.holds(line))
