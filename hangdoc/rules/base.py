"""What a rule is: a slug, a title, and a pure function of the analysed bundle."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from hangdoc.analyze.diagnose import Diagnosis, RankView
from hangdoc.analyze.timeline import Timeline, timelines
from hangdoc.model import Bundle, Finding, ProcessInfo, Role, Severity


@dataclass(frozen=True)
class Context:
    """Everything a rule may read: the bundle and what the analysis derived from it."""

    bundle: Bundle
    diagnosis: Diagnosis
    lines: dict[int, Timeline] | None = None    # the bundle's timelines, when already built

    @cached_property
    def timelines(self) -> dict[int, Timeline]:
        return self.lines if self.lines is not None else timelines(self.bundle)

    def culprit_views(self) -> list[RankView]:
        culprits = set(self.diagnosis.culprits)
        return [v for v in self.diagnosis.ranks if culprits.intersection(v.ranks)]

    def starved_culprits(self) -> list[RankView]:
        """The culprits of a hang that wait on their DataLoader: where the data rules look."""
        if self.diagnosis.verdict != "hang":
            return []
        return [v for v in self.culprit_views() if v.reading.state == "dataloader-wait"]

    def workers_of(self, rank_pid: int) -> list[ProcessInfo]:
        return [p for p in self.bundle.job.children_of(rank_pid) if p.role is Role.WORKER]


@dataclass(frozen=True)
class Rule:
    """One slug hangdoc can print, said once: what it is called, how bad it is, what it looks at,
    the fix it proposes, and (for the live rules) the pure function that finds it. Its page is
    `hangdoc/rules/pages/<slug>.md`, shipped in the package (`hangdoc explain SLUG`)."""

    slug: str
    title: str
    severity: Severity
    check: Callable[[Context], list[Finding]] | None = None   # None: raised by `check` or `run`, not a live rule
    summary: str = ""     # one paragraph: what the rule looks at
    fix: str = ""
    snippet: str | None = None                  # code the fix shows
    commands: tuple[str, ...] = ("watch", "report", "run")   # the commands that print it

    @property
    def page(self) -> str:
        return f"{self.slug}.md"


def finding(rule: Rule, ranks, title: str, evidence, fix: str | None = None, severity: Severity | None = None) -> Finding:
    """A finding of `rule`: its fix unless the finding words its own (with figures of this job)."""
    return Finding(rule=rule.slug, severity=severity or rule.severity,
                   ranks=tuple(sorted(r for r in ranks if r is not None)),
                   title=title, evidence=tuple(evidence), fix=fix if fix is not None else rule.fix)
