"""Every module under hangdoc/ stays under 500 lines.

A module that long holds more than one job: split it along a seam (model/capture.py gave its
stacks to model/stack.py and the Flight Recorder records to model/flight.py; render/html.py its
timeline to render/html_timeline.py) rather than raising the limit.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "hangdoc"
MAX_LINES = 500          # a module that reaches it fails


def too_long(root: Path, limit: int = MAX_LINES) -> list[str]:
    """"hangdoc/model/capture.py: 597 lines" for each Python module under `root` of `limit` lines or more."""
    found = []
    for path in sorted(root.rglob("*.py")):
        count = len(path.read_bytes().splitlines())
        if count >= limit:
            found.append(f"{path.relative_to(root.parent)}: {count} lines")
    return found


def test_every_module_under_hangdoc_is_under_500_lines():
    # GIVEN every Python module of the package
    # WHEN their lines are counted
    long = too_long(ROOT)
    # THEN none reaches the limit
    assert long == [], f"split these along a seam, one job a module (limit {MAX_LINES} lines): {long}"


def test_a_module_of_exactly_the_limit_is_named(tmp_path):
    # GIVEN a package with a module one line short of the limit, one at it and one past it
    package = tmp_path / "hangdoc"
    (package / "sub").mkdir(parents=True)
    (package / "short.py").write_text("x = 1\n" * (MAX_LINES - 1))
    (package / "sub" / "at.py").write_text("x = 1\n" * (MAX_LINES - 1) + "x = 1")   # no final newline
    (package / "past.py").write_text("x = 1\n" * (MAX_LINES + 12))
    # WHEN the check reads it
    long = too_long(package)
    # THEN the two that reach the limit are named with their lengths, the short one is not
    assert long == [f"hangdoc/past.py: {MAX_LINES + 12} lines", f"hangdoc/sub/at.py: {MAX_LINES} lines"]
