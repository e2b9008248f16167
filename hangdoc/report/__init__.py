"""From a diagnosis to the Report: every rule run, the ranks laid out, the verdict made final.

The only floor where a verdict becomes final: a watch's timeout, an interrupt and a bundle made
of Flight Recorder dumps alone enter here as inputs (`hangdoc/report/verdict.py`).
"""
from hangdoc.report.build import build_report, pg_timeout, report_of, report_without_ranks

__all__ = ["build_report", "pg_timeout", "report_of", "report_without_ranks"]
