"""What a rule is, said once, and the one way a Finding is made from it.

The live rules, `hangdoc check`'s checkers and `hangdoc run` all declare `Rule` records; the record
sits on the model floor so that each of them declares and raises findings without importing another.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Callable

from hangdoc.model.report import Finding
from hangdoc.model.vocab import Severity, Word


class Cause(Word):
    """What kind of cause a live rule names. A rule later in the order reads it to stand back where
    an earlier one already named the cause for a rank (rules/base.py: `Context.explained`)."""

    WORKERS = "workers"      # what holds a rank's DataLoader workers (dataloader-stall stands back)
    OWN_CODE = "own-code"    # what holds a rank in its own code (the collective findings stand back)
    DATA = "data"            # the data pipeline as a whole: its shards, its loader, the GPU it starves
    PROCESS = "process"      # what holds a rank's process itself, whatever its code: a stop (SIGSTOP, a tracer)


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
    causes: frozenset[Cause] = frozenset()      # the kinds of cause it names; none: a generic finding

    @property
    def root_cause(self) -> bool:
        """A root cause in the data pipeline (its workers or its data), which a report lists before
        the generic collective findings it explains."""
        return bool(self.causes & {Cause.WORKERS, Cause.DATA}) and Cause.OWN_CODE not in self.causes

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
