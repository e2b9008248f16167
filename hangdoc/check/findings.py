"""Order `check`'s findings and turn them into an exit code.

The checkers build their findings with `hangdoc.model.finding`, from the record itself, capping
the evidence at MAX_EVIDENCE lines.
"""
from __future__ import annotations

from collections.abc import Iterable

from hangdoc.base.errors import EXIT_FINDINGS, EXIT_OK
from hangdoc.model import Finding, Severity

MAX_EVIDENCE = 12


def ordered(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    return tuple(sorted(findings, key=lambda f: (f.severity.rank, f.rule)))


def exit_code(findings: Iterable[Finding], fail_on: Severity) -> int:
    """1 when any finding is at or above `fail_on`, else 0."""
    return EXIT_FINDINGS if any(f.severity.rank <= fail_on.rank for f in findings) else EXIT_OK
