"""From a bundle to the final Report: every rule run, the ranks laid out, the verdict made final.

`judge` (report/judge.py) is the only way from evidence to a final Report: how the evidence came to
an end (a watch round, a job that ended, a timeout, an interrupt, dumps alone) enters it as an input.
"""
from hangdoc.report.build import report_of, report_without_ranks
from hangdoc.report.judge import RUNNING, End, Judgement, judge

__all__ = ["RUNNING", "End", "Judgement", "judge", "report_of", "report_without_ranks"]
