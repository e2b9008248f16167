"""`--help` in an 80-column terminal: paragraphs wrap at the width, not where the docstring's lines
ended, and no option's value list is cut in two."""
from __future__ import annotations

import re

import pytest

from hangdoc.cli import main, reflowed

WIDTH = 80
COMMANDS = [["--help"], ["watch", "--help"], ["run", "--help"], ["report", "--help"], ["ps", "--help"],
            ["check", "data", "--help"], ["check", "env", "--help"], ["demo", "--help"]]


def early_breaks(text: str) -> list[str]:
    """Prose lines (outside the option boxes) broken before the width: the next line's first word
    would have fitted on them."""
    lines = [line.strip() for line in text.splitlines()]
    prose = [line if line and line[0] not in "│╭╰" and not line.startswith("Usage:") else "" for line in lines]
    return [a for a, b in zip(prose, prose[1:]) if a and b and len(a) + 1 + len(b.split()[0]) <= WIDTH - 2]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_help_wraps_at_the_terminal_width_only(argv, monkeypatch, capsys):
    # GIVEN an 80-column terminal
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("NO_COLOR", "1")
    # WHEN a command's --help is printed
    assert main(argv) == 0
    out = capsys.readouterr().out
    # THEN no line of prose ends before the width allows, and no list of values is cut in two
    assert early_breaks(out) == []
    assert not re.search(r"<[\w|-]*\|\s", out)
    assert all(len(line) <= WIDTH for line in out.splitlines())


def test_a_docstring_is_reflowed_paragraph_by_paragraph():
    # GIVEN a docstring with paragraphs broken over lines, and a list
    doc = """First line
    goes on.

    Second paragraph
    also goes on.
    - an item
    - another
    """
    # WHEN reflowed THEN each paragraph is one line, the list's lines stay
    assert reflowed(doc) == "First line goes on.\n\nSecond paragraph also goes on.\n- an item\n- another"
