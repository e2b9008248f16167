"""The one integer parser: environments, /proc, py-spy's reprs and Flight Recorder dumps read alike."""
from __future__ import annotations

import pytest

from hangdoc.base.parse import to_int


@pytest.mark.parametrize("value, number", [("8", 8), ("-3", -3), (" 42\n", 42), (7, 7), (3.9, 3)])
def test_a_number_reads_as_its_int(value, number):
    # GIVEN a number as an environment, /proc or a dump writes it
    # WHEN it is parsed
    # THEN it is that int
    assert to_int(value) == number


@pytest.mark.parametrize("value", [None, "", "x", "1.5", "0x10", True, False, [1], {"a": 1}])
def test_anything_else_reads_as_none(value):
    # GIVEN an unset variable, a word, a JSON boolean or a container
    # WHEN it is parsed
    # THEN it is None, never an exception
    assert to_int(value) is None
