"""The one registry of output formats, shared by `report`, `watch`, `run`, `demo` and `check`.

Each format names the renderer of a Report and, where `check` prints it, the renderer of a check
result. The dispatch is exhaustive: every member of `OutputFormat` has its entry (a test and the
check at import keep it so), and a format a command does not print is an error that says which
ones it does, never a silent fall back to text. Each renderer is reached through a small function
that imports it when first used (a command loads only its own, and the imports stay in sight of a
type checker and of the import graph).
"""
from __future__ import annotations

import enum
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


Render = Callable[..., None]       # render(report or check result, out)


def _text() -> Render:
    from hangdoc.render.text import render_text
    return render_text


def _json() -> Render:
    from hangdoc.render.json import render_json
    return render_json


def _markdown() -> Render:
    from hangdoc.render.markdown import render_markdown
    return render_markdown


def _html() -> Render:
    from hangdoc.render.html import render_html
    return render_html


def _trace() -> Render:
    from hangdoc.render.trace import render_trace
    return render_trace


def _check_text() -> Render:
    from hangdoc.render.check_text import render_result
    return render_result


def _check_json() -> Render:
    from hangdoc.render.check_json import render_json
    return render_json


def _check_markdown() -> Render:
    from hangdoc.render.check_markdown import render_result
    return render_result


@dataclass(frozen=True)
class FormatEntry:
    """A format's renderers, each reached through a function that imports it when first used."""

    report: Callable[[], Render]                  # -> render(report, out)
    check: Callable[[], Render] | None = None     # -> render(check_result, out); None: `check` does not print it
    document: bool = False           # a whole document on stdout (JSON, a page, a trace)
    what: str = ""                   # the words a --help shows


FORMATS: dict[OutputFormat, FormatEntry] = {
    OutputFormat.text: FormatEntry(_text, _check_text, what="text"),
    OutputFormat.json: FormatEntry(_json, _check_json, document=True, what="json"),
    OutputFormat.markdown: FormatEntry(_markdown, _check_markdown, what="markdown (for a GitHub issue)"),
    OutputFormat.html: FormatEntry(_html, document=True,
                                   what="html (one self-contained page with every rank's timeline)"),
    OutputFormat.trace: FormatEntry(_trace, document=True, what="trace (Chrome trace-event JSON for Perfetto)"),
}
if set(FORMATS) != set(OutputFormat):   # exhaustive, or the package does not import
    raise ImportError(f"formats without a renderer: {sorted(set(OutputFormat) - set(FORMATS))}")

CHECK_FORMATS = tuple(f for f, entry in FORMATS.items() if entry.check is not None)


def entry_of(fmt: OutputFormat | str) -> FormatEntry:
    try:
        return FORMATS[OutputFormat(fmt)]
    except ValueError:
        raise HangdocError(f"unknown format {fmt!r}; the formats are: {', '.join(f.value for f in OutputFormat)}") \
            from None


def render_report(report: Report, fmt: OutputFormat | str, out: TextIO) -> None:
    """`report` in `fmt` to `out`."""
    entry_of(fmt).report()(report, out)
    out.flush()


def render_check(result, fmt: OutputFormat | str, out: TextIO) -> None:
    """A `check` result in `fmt` to `out`; a format check does not print is an error naming the ones it does."""
    entry = entry_of(fmt)
    if entry.check is None:
        raise HangdocError(f"check prints {', '.join(f.value for f in CHECK_FORMATS)}, "
                           f"not {OutputFormat(fmt).value}")
    entry.check()(result, out)
    out.flush()


def help_of(formats=tuple(OutputFormat)) -> str:
    """The --format help: the formats a command prints, in words."""
    words = [FORMATS[f].what for f in formats]
    return ", ".join(words[:-1]) + " or " + words[-1] + "."
