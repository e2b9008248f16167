"""From an analysis to the report: every rule run over it, and what the analysis read laid out.
Pure; it reads no evidence itself (analyze/assess.py: `analyse` did)."""
from __future__ import annotations

from hangdoc.analyze.assess import Analysis
from hangdoc.model import REPORT_SCHEMA, Finding, Report, Severity, Verdict
from hangdoc.rules import run_rules
from hangdoc.rules.base import Context
from hangdoc.rules.rank_died import RULE as RANK_DIED


def report_of(analysis: Analysis) -> Report:
    """The report of an analysis: every rule run, the ranks laid out (a row per class when the
    views stand for classes)."""
    diagnosis = analysis.diagnosis
    findings = run_rules(Context(analysis.evidence, diagnosis, analysis.lines, facts=analysis.worked))
    return Report(
        schema=REPORT_SCHEMA,
        verdict=diagnosis.verdict,
        detected_after_s=(round(diagnosis.decided_at - diagnosis.onset, 1)
                          if Verdict(diagnosis.verdict).failed and diagnosis.onset is not None else None),
        culprit_ranks=diagnosis.culprits,
        findings=findings,
        ranks=analysis.ranks,
        pg_timeout_s=analysis.pg_timeout_s,
        backend=analysis.backend,
        timeout_remaining_s=analysis.timeout_remaining_s,
        host=analysis.host,
        threshold=analysis.threshold,
        samples=analysis.samples,
        flight=analysis.flight,
        missing_stacks=analysis.missing_stacks,
        slow=analysis.slow,
        stack_tree=analysis.stack_tree,
        stack_classes=analysis.stack_classes,
        cause=_cause(analysis.crash_story, findings),
        before=analysis.before,
        restarts=analysis.restarts,
        lanes=analysis.lanes,
    )


def _cause(story: tuple[str, ...], findings: tuple[Finding, ...]) -> tuple[str, ...]:
    """A crash's own story, unless a rule already names the cause with its evidence. rank-died says
    how the rank died and leaves its exception to this line, said once."""
    if any(f.severity is Severity.CRITICAL and f.rule != RANK_DIED.slug for f in findings):
        return ()
    return story


def report_without_ranks(verdict: Verdict, findings: tuple[Finding, ...]) -> Report:
    """A verdict reached before any rank was seen (a command that failed at start, a run out of time)."""
    return Report(schema=REPORT_SCHEMA, verdict=verdict, detected_after_s=None, culprit_ranks=(),
                  findings=findings, ranks=())
