"""The one registry of output formats, shared by `report`, `watch`, `run`, `demo` and `check`.

Each format names the renderer of a Report and, where `check` prints it, the renderer of a check
result. The dispatch is exhaustive: every member of `OutputFormat` has its entry (a test and the
check at import keep it so), and a format a command does not print is an error that says which
ones it does, never a silent fall back to text. Renderers are imported when used, so a command
loads only its own.
"""
from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass
from typing import Callable, TextIO

from hangdoc.base.errors import HangdocError
from hangdoc.model import Report


class OutputFormat(str, enum.Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"
    trace = "trace"

    def __str__(self) -> str:
        # Its value, as the CLI's option parser reads a value an option's callback hands back.
        return self.value

    @property
    def document(self) -> bool:
        """A document on stdout, nothing else there: a command's own output goes to stderr."""
        return FORMATS[self].document


@dataclass(frozen=True)
class FormatEntry:
    """Where a format's renderers live: `module:function`, imported when first used."""

    report: str                      # render(report, out)
    check: str | None = None         # render(check_result, out); None: `check` does not print it
    document: bool = False           # a whole document on stdout (JSON, a page, a trace)
    what: str = ""                   # the words a --help shows


FORMATS: dict[OutputFormat, FormatEntry] = {
    OutputFormat.text: FormatEntry("hangdoc.render.text:render_text", "hangdoc.render.check_text:render_result",
                                   what="text"),
    OutputFormat.json: FormatEntry("hangdoc.render.json:render_json", "hangdoc.render.check_json:render_json",
                                   document=True, what="json"),
    OutputFormat.markdown: FormatEntry("hangdoc.render.markdown:render_markdown",
                                       "hangdoc.render.check_markdown:render_result", what="markdown (for a GitHub issue)"),
    OutputFormat.html: FormatEntry("hangdoc.render.html:render_html", document=True,
                                   what="html (one self-contained page with every rank's timeline)"),
    OutputFormat.trace: FormatEntry("hangdoc.render.trace:render_trace", document=True,
                                    what="trace (Chrome trace-event JSON for Perfetto)"),
}
if set(FORMATS) != set(OutputFormat):   # exhaustive, or the package does not import
    raise ImportError(f"formats without a renderer: {sorted(set(OutputFormat) - set(FORMATS))}")

CHECK_FORMATS = tuple(f for f, entry in FORMATS.items() if entry.check is not None)


def _load(where: str) -> Callable:
    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)


def entry_of(fmt: OutputFormat | str) -> FormatEntry:
    try:
        return FORMATS[OutputFormat(fmt)]
    except ValueError:
        raise HangdocError(f"unknown format {fmt!r}; the formats are: {', '.join(f.value for f in OutputFormat)}") \
            from None


def render_report(report: Report, fmt: OutputFormat | str, out: TextIO) -> None:
    """`report` in `fmt` to `out`."""
    _load(entry_of(fmt).report)(report, out)
    out.flush()


def render_check(result, fmt: OutputFormat | str, out: TextIO) -> None:
    """A `check` result in `fmt` to `out`; a format check does not print is an error naming the ones it does."""
    entry = entry_of(fmt)
    if entry.check is None:
        raise HangdocError(f"check prints {', '.join(f.value for f in CHECK_FORMATS)}, "
                           f"not {OutputFormat(fmt).value}")
    _load(entry.check)(result, out)
    out.flush()


def help_of(formats=tuple(OutputFormat)) -> str:
    """The --format help: the formats a command prints, in words."""
    words = [FORMATS[f].what for f in formats]
    return ", ".join(words[:-1]) + " or " + words[-1] + "."
