"""The suite itself: pytest collects unit and integration tests as top-level modules (no packages),
so two test modules of one basename stop the whole collection ("import file mismatch")."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename():
    # GIVEN every test module of the suite
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)
    # THEN each basename is used once
    assert [name for name, n in names.items() if n > 1] == []
