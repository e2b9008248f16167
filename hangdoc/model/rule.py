"""What a rule is, said once, and the one way a Finding is made from it.

The live rules, `hangdoc check`'s checkers and `hangdoc run` all declare `Rule` records; the record
sits on the model floor so that each of them declares and raises findings without importing another.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Callable

from hangdoc.model.report import Finding
from hangdoc.model.vocab import Severity


@dataclass(frozen=True)
class Rule:
    """One slug hangdoc can print, said once: what it is called, how bad it is, what it looks at,
    the fix it proposes, and (for the live rules) the pure function that finds it. Its page is
    `hangdoc/rules/pages/<slug>.md`, shipped in the package (`hangdoc explain SLUG`)."""

    slug: str
    title: str
    severity: Severity
    # The live rules' `check(Context) -> findings`; None: raised by `check` or `run`, not a live rule.
    check: Callable[..., list[Finding]] | None = None
    summary: str = ""     # one paragraph: what the rule looks at
    fix: str = ""
    snippet: str | None = None                  # code the fix shows
    commands: tuple[str, ...] = ("watch", "report", "run")   # the commands that print it

    @property
    def page(self) -> str:
        return f"{self.slug}.md"


def finding(rule: Rule, ranks: Iterable[int | None], title: str, evidence: Iterable[str],
            fix: str | None = None, severity: Severity | None = None, *,
            max_evidence: int | None = None, cause: str | None = None) -> Finding:
    """A finding of `rule`: its fix unless the finding words its own (with figures of this job).

    `max_evidence` cuts long evidence to that many lines, the last one counting the rest."""
    lines = tuple(evidence)
    if max_evidence is not None and len(lines) > max_evidence:
        lines = lines[:max_evidence - 1] + (f"... and {len(lines) - max_evidence + 1} more",)
    return Finding(rule=rule.slug, severity=severity or rule.severity,
                   ranks=tuple(sorted({r for r in ranks if r is not None})),
                   title=title, evidence=lines, fix=fix if fix is not None else rule.fix, cause=cause)
