"""What may reach each output format: redacted, then escaped for it.

Frame names, thread names, paths, log lines and exception texts come from the job (or
from a bundle someone shared) and may hold secrets, escape sequences, HTML or newlines.
Every renderer passes them through one of these functions, never raw.
"""
from __future__ import annotations

import html
import re
from collections import deque
from typing import Any

from hangdoc.base.redact import redact_text

# C0 controls (tab and newline are handled per format), DEL, C1 controls (CSI is \x9b), and the
# bidirectional overrides that make text read differently from what it is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


# Outside code, Markdown prose escapes only what could make markup of a job's text: a `<` that
# could open an HTML tag, comment, declaration or autolink (`<-` stays), a `]` that could close a
# link, an image or a link definition (`](`, `][`, `]:`: `[judged from frames]` stays), a backslash
# that would escape what follows it, and a backtick that opens no code span of ours. Emphasis too:
# every `*` and `~`, and an `_` run unless letters or digits stand on both sides of it (`__next__`
# after a dot is bold on GitHub; `try_get_data` never is).
_LINK_CLOSE = re.compile(r"\](?=[(\[:])")
_ESCAPING = re.compile(r"\\(?=[!-/:-@\[-`{-~]|$)")
_TICKS = re.compile(r"`+")
_EMPHASIS = re.compile(r"[*~]|_+")
_WORDLIKE = re.compile(r"[^\W_]")
# GitHub makes links of bare URLs too (its autolink extension: `https://...`, `www.`, an e-mail
# address): each is broken where a reader still reads it (`https[:]//`, `www[.]`, `me[@]host.org`).
_BARE_SCHEME = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,31}):(?=//)")
_BARE_WWW = re.compile(r"(?i)(?<![\w.-])www\.")
_BARE_MAIL = re.compile(r"(?<=[\w.+-])@(?=[\w-]+\.[\w.-]*[A-Za-z])")


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
    """Markdown prose (titles, evidence, fixes): one line that renders as text and code only,
    never as HTML, a link or an image.

    A code span is a run of n backticks and the next run of exactly n, as CommonMark reads it; each
    is written again with a fence longer than any run inside it (`md_span`), and everything else is
    escaped (a backtick that opens no span included), so a renderer sees the spans this function saw."""
    text = plain(text)
    runs = [(m.start(), m.end()) for m in _TICKS.finditer(text)]
    later: dict[int, deque[int]] = {}
    for i, (start, end) in enumerate(runs):
        later.setdefault(end - start, deque()).append(i)
    out, at, i = [], 0, 0
    while i < len(runs):
        start, end = runs[i]
        same = later[end - start]
        while same and same[0] <= i:
            same.popleft()
        if not same:
            i += 1
            continue       # opens nothing: stays in the prose, escaped there
        j = same.popleft()
        out += [_prose(text[at:start]), md_span(text[end:runs[j][0]])]
        at, i = runs[j][1], j + 1
    out.append(_prose(text[at:]))
    return "".join(out)


def _prose(text: str) -> str:
    text = _ESCAPING.sub(r"\\\\", text)
    text = _BARE_WWW.sub(lambda m: m.group(0)[:-1] + "[.]", _BARE_SCHEME.sub(r"\1[:]", text))
    text = _BARE_MAIL.sub("[@]", text)
    text = _EMPHASIS.sub(_no_emphasis, text)
    # Every angle bracket of the prose is an entity, the one that opens no tag too: `<locals>`
    # reads `&lt;locals&gt;`, never half escaped.
    text = text.replace("<", "&lt;").replace(">", "&gt;")
    return _LINK_CLOSE.sub(r"\\]", text).replace("`", "\\`")


def _no_emphasis(match: re.Match) -> str:
    run, text = match.group(0), match.string
    start, end = match.span()
    if run[0] == "_" and _WORDLIKE.match(text[start - 1:start] or " ") and _WORDLIKE.match(text[end:end + 1] or " "):
        return run
    return "".join("\\" + c for c in run)


def md_span(code: str) -> str:
    """A CommonMark code span holding `code` as it is (nothing in a span is HTML, a link or an
    escape): a fence of one backtick more than the longest run inside, padded with a space when
    the code starts or ends with a backtick or a space (CommonMark strips one such pair)."""
    fence = "`" * (max((len(m.group(0)) for m in _TICKS.finditer(code)), default=0) + 1)
    pad = " " if code[:1] in ("`", " ") or code[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{code}{pad}{fence}"


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
    if isinstance(value, (list, tuple)):       # a number is itself: a million ranks make no call each
        return [redact_tree(v) if isinstance(v, (str, dict, list, tuple)) else v for v in value]
    return value
