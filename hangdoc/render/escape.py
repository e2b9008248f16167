"""What may reach each output format: redacted, then escaped for it.

Frame names, thread names, paths, log lines and exception texts come from the job (or
from a bundle someone shared) and may hold secrets, escape sequences, HTML or newlines.
Every renderer passes them through one of these functions, never raw.
"""
from __future__ import annotations

import html
import re
from typing import Any

from hangdoc.base.redact import redact_text

# C0 controls (tab and newline are handled per format), DEL, C1 controls (CSI is \x9b), and the
# bidirectional overrides that make text read differently from what it is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


# Only a `<` that could open an HTML tag, comment or declaration needs escaping: `<-` stays.
_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")
_CODE_SPAN = re.compile(r"(`[^`]*`)")


def _visible(match: re.Match) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(text: str | None, multiline: bool = False) -> str:
    """Redacted, with control characters shown as \\xNN; newlines kept only if `multiline`."""
    text = redact_text(text or "")
    text = _CONTROL.sub(_visible, text.replace("\t", "    "))
    if not multiline:
        text = text.replace("\r", "\\r").replace("\n", "\\n")
    else:
        text = text.replace("\r", "\\r")
    return text


def terminal(text: str | None) -> str:
    """For a terminal: no ESC, no C0/C1 control character reaches it (no screen clears, no titles)."""
    return plain(text)


def md_text(text: str | None) -> str:
    """Markdown prose (titles, evidence, fixes): no raw HTML, one line."""
    parts = _CODE_SPAN.split(plain(text))
    # Inside a `code span` nothing is HTML (and an entity would show as typed): escape outside only.
    return "".join(part if i % 2 else _TAG_OPEN.sub("&lt;", part) for i, part in enumerate(parts))


def md_cell(text: str | None) -> str:
    """A Markdown table cell: prose that cannot end the cell."""
    return (md_text(text) or "-").replace("|", "\\|")


def md_code(text: str | None) -> str:
    """Inside a `code span` of a table cell (no entity decoding there, so no &lt;)."""
    return (plain(text) or "-").replace("`", "'").replace("|", "\\|")


def md_fence(text: str | None) -> str:
    """A line inside a ``` fence: it must not close the fence."""
    return plain(text).replace("```", "`\u200b``")


def html_text(text: object) -> str:
    """Job-controlled text for HTML: redacted, control characters shown, then escaped (quotes too)."""
    return html.escape(plain(str(text) if text is not None else ""), quote=True)


def xml(text: str | None) -> str:
    """XML 1.0 text or attribute: ElementTree escapes <, > and &; control characters are invalid there."""
    return plain(text, multiline=True).replace("\ufffe", "\\ufffe").replace("\uffff", "\\uffff")


def redact_tree(value: Any) -> Any:
    """Every string of a JSON document redacted (json.dumps escapes control characters itself)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v) for v in value]
    return value
