"""Attach late, as users do: start a scenario, let it run (or hang) for a while, then watch it.

    result = attach_late(SCENARIOS["worker-deadlock"], delay_s=30)

`delay_s` counts from the fault (a hang scenario's marker) or from the moment every rank is
ready (a healthy one). The watch is `hangdoc watch` in-process, with no flag but a --timeout;
the job is ended whatever happens. Used by `make bench` (late) and the late-attach tests.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hangdoc.model import Report, Verdict
from hangdoc.scenarios import Scenario
from hangdoc.scenarios.launch import start_job, stop_job, wait_for

LONG_RUN = 1_000_000     # steps: a healthy scenario keeps running until it is ended


@dataclass(frozen=True)
class LateResult:
    scenario: str
    delay_s: float                 # fault (or ready) -> attach, as asked
    attached_after_s: float | None  # fault (or ready) -> attach, as it happened
    verdict: str
    culprits: tuple[int, ...]
    rules: tuple[str, ...]
    attach_to_verdict_s: float     # attach -> the watch's end (its verdict, or its --timeout)
    waited_before_s: float | None  # what the report says was known of the past
    decided_from_past: bool
    report: Report
    why: str | None = None          # the run itself went wrong (the job never got ready)

    @property
    def right(self) -> bool:
        return self.why is None and self.verdict == self.expected[0] and \
            (self.verdict != Verdict.HANG or self.culprits == self.expected[1])

    expected: tuple[str, tuple[int, ...]] = ("healthy", ())


def attach_late(scenario: Scenario, delay_s: float, *, timeout_s: float = 120.0, interval_s: float | None = None,
                workdir: str | Path | None = None) -> LateResult:
    """Run `scenario`, wait `delay_s` after its fault (or readiness), watch it until a verdict."""
    from hangdoc.live.options import WatchOptions
    from hangdoc.live.probes import make_probes
    from hangdoc.live.watcher import Watcher

    expected = (scenario.verdict, tuple(scenario.culprit_ranks))
    with tempfile.TemporaryDirectory(prefix=f"hangdoc-late-{scenario.name}-") as tmp:
        work = Path(workdir) if workdir else Path(tmp)
        scenario.prepare(work)
        steps = None if scenario.verdict == Verdict.HANG else LONG_RUN
        job = start_job(scenario.command(work, max_steps=steps), log_path=work / "job.log")
        try:
            marker = [scenario.fault_marker(work)] if scenario.verdict == Verdict.HANG else scenario.ready_markers(work)
            if not wait_for(marker, job, timeout=180.0):
                return _failed(scenario, delay_s, expected, f"no {'fault' if scenario.verdict == Verdict.HANG else 'ready'} "
                               f"marker in 180 s (see {work / 'job.log'})")
            began = scenario.read_fault(work)["time"] if scenario.verdict == Verdict.HANG else time.time()
            time.sleep(max(0.0, began + delay_s - time.time()))
            options = WatchOptions(timeout_s=timeout_s, gpu=False,
                                   **({"interval_s": interval_s} if interval_s else {}))
            attached = time.time()
            outcome = Watcher(job.pid, make_probes(options), options).run()
            took = time.time() - attached
        finally:
            stop_job(job)
    report = outcome.report
    before = report.before
    return LateResult(scenario.name, delay_s, round(attached - began, 1), report.verdict,
                      tuple(report.culprit_ranks), tuple(dict.fromkeys(f.rule for f in report.findings)),
                      round(took, 1), before.waited_s if before else None, bool(before and before.decided),
                      report, expected=expected)


def _failed(scenario: Scenario, delay_s: float, expected, why: str) -> LateResult:
    from hangdoc.report.judge import unjudged

    empty = unjudged()
    return LateResult(scenario.name, delay_s, None, "none", (), (), 0.0, None, False, empty, why=why,
                      expected=expected)
