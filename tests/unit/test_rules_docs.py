"""Every rule has a docs page that `hangdoc explain` prints, and its example is a real golden finding."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hangdoc.cli import main
from hangdoc.render.escape import md_text
from hangdoc.rules import all_rules, get_rule

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "hangdoc" / "rules" / "pages"
GOLDEN = ROOT / "tests" / "golden"
DOCUMENTED = tuple(r.slug for r in all_rules())
SECTIONS = ("## What it detects", "## Evidence it cites", "## Example", "## Fix", "## False positives and limits")
_EXAMPLE = re.compile(r"<!-- example: (\S+) (\S+) -->\n\n```text\n(.*?)\n```", re.S)


@pytest.mark.parametrize("slug", DOCUMENTED)
def test_every_rule_has_a_page_with_every_section(slug):
    # GIVEN a registered rule THEN its page (hangdoc/rules/pages/<slug>.md) exists and has every section, a code fix
    assert get_rule(slug) is not None
    page = (DOCS / f"{slug}.md").read_text()
    assert page.startswith(f"# {slug}\n")
    for section in SECTIONS:
        assert section in page, section
    fix = page.split("## Fix", 1)[1].split("## False positives", 1)[0]
    assert "```" in fix


@pytest.mark.parametrize("slug", DOCUMENTED)
def test_explain_prints_the_page(slug, capsys):
    # WHEN `hangdoc explain <slug>` runs THEN it prints the page, without the markers where its examples
    # are filled in, and exits 0
    assert main(["explain", slug]) == 0
    out = capsys.readouterr().out
    assert "<!--" not in out
    assert out == re.sub(r"<!-- example: \S+ \S+ -->\n\n", "", (DOCS / f"{slug}.md").read_text())


def test_explain_glossary_defines_every_word_the_live_view_prints(capsys):
    # WHEN `hangdoc explain glossary` runs
    assert main(["explain", "glossary"]) == 0
    out = capsys.readouterr().out
    # THEN the header's words, the table's columns, every PROGRESS word and every state are defined there
    from hangdoc.model import RankState, WorkerState
    from hangdoc.render.words import PROGRESS_WORDS

    words = ["sample N", "quiet Q s of T s", "quiet Q s, over T s", "flight recorder", "unset (torch's default)",
             "**RANK**", "**STATE**", "**FOR**", "**PROGRESS**", "**GPU**", "**TOP FRAME**", "`spin`", "`straggler`",
             "`waits 63%`", "`data 64%`", *(f"`{w}`" for w in PROGRESS_WORDS.values()),
             *(f"`{s.value}`" for s in (*RankState, *WorkerState))]
    assert [w for w in words if w not in out] == []


@pytest.mark.parametrize("slug", DOCUMENTED)
def test_the_example_is_the_finding_of_a_golden_case(slug):
    # GIVEN the page's example block(s) THEN each names a golden case about this rule,
    # and its title is the one in that case's expected report
    examples = _EXAMPLE.findall((DOCS / f"{slug}.md").read_text())
    assert examples, "no filled example (run tests/golden_record.py --docs)"
    for case, rule, block in examples:
        assert rule == slug
        title = block.splitlines()[0].split(": ", 1)[1]
        assert md_text(title) in (GOLDEN / case / "expected.md").read_text()   # as Markdown writes it
