"""What several commands share: the report format option and verdict -> exit code."""
from __future__ import annotations

import sys
from enum import Enum
from typing import TextIO

from hangdoc.errors import EXIT_CRASH, EXIT_HANG, EXIT_OK, EXIT_SUSPECT
from hangdoc.model import Bundle, Report


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


def verdict_exit_code(verdict: str) -> int:
    return {"hang": EXIT_HANG, "crash": EXIT_CRASH, "suspect": EXIT_SUSPECT}.get(verdict, EXIT_OK)


def emit_report(report: Report, fmt: Format, bundles: list[Bundle] | None = None,
                out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if fmt is Format.json:
        from hangdoc.render.json import render_json

        render_json(report, out)
    elif fmt is Format.markdown:
        from hangdoc.render.markdown import render_markdown

        render_markdown(report, out, bundles)
    else:
        from hangdoc.render.text import render_text

        render_text(report, out, bundles=bundles)
    out.flush()
