"""One way to make a Finding (`model.finding`) and one way to draw it (`render.finding`)."""
from __future__ import annotations

import io

from hangdoc.check.sections import Document
from hangdoc.model import Rule, Severity, finding
from hangdoc.render.check_markdown import render_markdown
from hangdoc.render.check_text import render_text

RECORD = Rule("made-up", "A made-up record", Severity.WARNING, fix="Do the thing.", snippet="do_the_thing()",
              commands=("check",))


def test_a_finding_takes_its_fix_and_severity_from_its_record_unless_given():
    plain = finding(RECORD, [3, None, 1, 3], "title", ["a"])
    assert (plain.rule, plain.severity, plain.fix) == ("made-up", Severity.WARNING, "Do the thing.")
    assert plain.ranks == (1, 3)
    own = finding(RECORD, [], "title", [], fix="Do this instead.", severity=Severity.INFO)
    assert (own.fix, own.severity) == ("Do this instead.", Severity.INFO)


def test_long_evidence_is_cut_with_a_count_only_when_asked():
    lines = [f"line {i}" for i in range(15)]
    assert len(finding(RECORD, [], "t", lines).evidence) == 15
    cut = finding(RECORD, [], "t", lines, max_evidence=12).evidence
    assert len(cut) == 12 and cut[-1] == "... and 4 more"


def test_check_draws_the_snippet_its_document_carries(monkeypatch):
    # GIVEN a check Document whose finding's slug no registry knows, and the code its fix shows
    monkeypatch.setenv("NO_COLOR", "1")
    doc = Document("hangdoc check data: x", "1 finding: 1 warning", (finding(RECORD, [2], "title", ["e"]),), (),
                   {"made-up": "do_the_thing()"})
    text, md = io.StringIO(), io.StringIO()
    # WHEN drawn as text and Markdown
    render_text(doc, text, width=100)
    render_markdown(doc, md)
    # THEN both show the code under the fix, read from the Document alone
    assert "WARNING  made-up  rank 2" in text.getvalue().splitlines()
    assert "      do_the_thing()" in text.getvalue().splitlines()
    assert "**Fix:** Do the thing.\n\n```\ndo_the_thing()\n```\n" in md.getvalue()
