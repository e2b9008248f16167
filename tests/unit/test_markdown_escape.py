"""Markdown prose built from a job's names renders as text under a CommonMark renderer: no raw
HTML, no link, no image, no hidden link definition, whatever backticks, brackets or backslashes
the names hold; hangdoc's own `code` words stay code."""
from __future__ import annotations

import re

import pytest

from hangdoc.render.escape import md_cell, md_text

markdown_it = pytest.importorskip("markdown_it")
RENDER = markdown_it.MarkdownIt("commonmark").enable("table").render

HOSTILE = [
    "x `<img src=x onerror=alert(1)>` y",
    "\\`<img src=x onerror=alert(1)>`",                 # an escaped backtick opens no code span
    "x ``` <b>bold</b> `` y",                          # runs of unequal length close nothing
    "a ``b`<img src=x>`` c",
    "`a``<img src=y>`",
    "![pixel](http://evil.example/x.png)",
    "[click here](http://evil.example)",
    "[docs][ref] and [ref]: http://evil.example",
    "[ref]: http://evil.example",
    "<http://evil.example>",
    "<script>alert(1)</script> <!-- c --> <?php ?>",
    "\\[x](http://evil.example)",
    "trailing backslash \\",
]


def visible(html: str) -> str:
    text = re.sub(r"<[^>]+>", "", html)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&").strip()


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_prose_renders_as_text_not_as_html_links_or_images(text):
    # GIVEN a name or a log line a job controls, in a report's Markdown prose
    html = RENDER(md_text(text))
    # WHEN a CommonMark renderer shows it THEN nothing but paragraphs and code is made of it
    tags = set(re.findall(r"<([a-z]+)", html))
    assert tags <= {"p", "code"}, (text, md_text(text), html)
    # AND every character of it is still shown
    assert visible(html).replace(" ", "") == text.replace("`", "").replace(" ", "") or \
        set(text.replace("`", "").replace(" ", "")) <= set(visible(html).replace(" ", "")), (text, html)


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_table_cells_stay_in_their_cell(text):
    table = "| a | b |\n|---|---|\n| " + md_cell(text) + " | end |\n"
    html = RENDER(table)
    assert "<img" not in html and "<a " not in html and "<script" not in html
    assert html.count("<td>") == 2, (text, html)


def test_own_code_words_stay_code_and_plain_text_stays_as_it_was():
    # GIVEN hangdoc's own prose: code words in backticks, ordinary punctuation
    assert md_text("run `hangdoc explain no-stack` [judged from frames]") == \
        "run `hangdoc explain no-stack` [judged from frames]"
    assert RENDER(md_text("a `x` b")).strip() == "<p>a <code>x</code> b</p>"
    # AND a code word holding backticks gets a longer fence, with padding, per CommonMark
    assert RENDER(md_text("``a ` b``")).strip() == "<p><code>a ` b</code></p>"


def test_angle_brackets_of_prose_are_escaped_alike():
    # GIVEN a stack line of the job's names, `<locals>` and an arrow among them
    text = md_text("f.<locals>.wrapper (a.py:1) <- <module> (b.py:2) > g")
    # WHEN it is written as Markdown prose THEN no bracket is left bare beside an escaped one
    assert "<" not in text and ">" not in text
    assert "f.&lt;locals&gt;.wrapper (a.py:1) &lt;- &lt;module&gt; (b.py:2) &gt; g" == text
    # AND a renderer still shows it as it was
    assert visible(RENDER(text)) == "f.<locals>.wrapper (a.py:1) <- <module> (b.py:2) > g"


# What GitHub's autolink extension makes a link of, bare: a scheme's URL, `www.`, an e-mail address.
_AUTOLINK = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://|(?<![\w.-])www\.|[\w.+-]@[\w-]+\.[\w.-]*[a-z]")


@pytest.mark.parametrize("text", ["see https://evil.example/phish now", "www.evil.example/login", "HTTP://X.Y",
                                  "ftp://evil.example/f", "mail admin@evil.example", "(https://evil.example)",
                                  "*www.evil.example*", "[x] https://evil.example"])
def test_a_bare_url_in_job_text_is_never_a_link(text):
    # GIVEN job text with a bare URL WHEN written as Markdown prose and as a table cell
    for written in (md_text(text), md_cell(text)):
        outside_code = re.sub(r"`[^`]*`", "", written)
        # THEN nothing an autolinker reads as a URL is left, and the words are still readable
        assert not _AUTOLINK.search(outside_code), written
        assert "evil" in written or "X.Y" in written


def test_a_url_in_a_code_span_stays_whole():
    assert md_text("run `curl https://example.org/x` first") == "run `curl https://example.org/x` first"
