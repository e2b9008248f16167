"""Build `check`'s findings with their records' fixes, order them, and turn them into an exit code."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from hangdoc.base.errors import EXIT_FINDINGS, EXIT_OK
from hangdoc.model import Finding, Severity

MAX_EVIDENCE = 12


def record(slug: str):
    from hangdoc.registry import record

    return record(slug)


def make(rule: str, severity: Severity, ranks: Iterable[int], title: str, evidence: Sequence[str]) -> Finding:
    """A Finding whose fix is the shared one for `rule`; long evidence is cut with a count."""
    evidence = list(evidence)
    if len(evidence) > MAX_EVIDENCE:
        evidence = evidence[:MAX_EVIDENCE - 1] + [f"... and {len(evidence) - MAX_EVIDENCE + 1} more"]
    return Finding(rule=rule, severity=severity, ranks=tuple(sorted(set(ranks))), title=title,
                   evidence=tuple(evidence), fix=record(rule).fix)


def ordered(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    return tuple(sorted(findings, key=lambda f: (f.severity.rank, f.rule)))


def exit_code(findings: Iterable[Finding], fail_on: Severity) -> int:
    """1 when any finding is at or above `fail_on`, else 0."""
    return EXIT_FINDINGS if any(f.severity.rank <= fail_on.rank for f in findings) else EXIT_OK
