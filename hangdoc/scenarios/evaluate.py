"""Run a scenario under `hangdoc run` and compare the diagnosis with its ground truth.

Used by `hangdoc demo`, the zoo tests and `make bench`: one code path, so what the
benchmark measures is what users run.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hangdoc.model import Report, Verdict
from hangdoc.scenarios import Scenario


@dataclass(frozen=True)
class ScenarioResult:
    scenario: str
    expected_verdict: str
    expected_culprits: tuple[int, ...]
    expected_rule: str | None
    verdict: str
    culprits: tuple[int, ...]
    rules: tuple[str, ...]
    seconds_to_verdict: float | None     # fault marker -> verdict
    wall_s: float
    report: Report

    @property
    def verdict_right(self) -> bool:
        return self.verdict == self.expected_verdict

    @property
    def localised(self) -> bool:
        """Verdict, culprit ranks and the expected rule all right."""
        rule_ok = self.expected_rule is None or self.expected_rule in self.rules
        return self.verdict_right and self.culprits == self.expected_culprits and rule_ok

    @property
    def false_alarm(self) -> bool:
        return self.expected_verdict == Verdict.HEALTHY and self.verdict != Verdict.HEALTHY


def evaluate(scenario: Scenario, workdir: str | Path | None = None, *, hang_after: float | None = None,
             interval: float = 1.0, timeout: float = 120.0, max_steps: int | None = None,
             on_sample: Callable | None = None, probes=None, stop_when_slow: bool = False,
             record: str | Path | None = None) -> ScenarioResult:
    """Prepare the scenario, run it under watch until the verdict, end it, score the answer.
    `stop_when_slow`: end on a settled slow verdict, as `hangdoc watch` does (a job that does not end).
    `record`: a directory the watch's rounds are recorded to (`run --record DIR`)."""
    from hangdoc.live.options import WatchOptions
    from hangdoc.live.probes import make_probes
    from hangdoc.live.runner import run_command

    with tempfile.TemporaryDirectory(prefix=f"hangdoc-{scenario.name}-") as tmp:
        work = Path(workdir) if workdir else Path(tmp)
        scenario.prepare(work)
        options = WatchOptions(interval_s=interval, hang_after_s=hang_after, timeout_s=timeout,
                               stop_when_slow=stop_when_slow)
        started = time.monotonic()
        recorder = None
        if record is not None:
            from hangdoc.bundle.recording import Recorder

            recorder = Recorder.of_command(record, "run", scenario=scenario.name)
        try:
            with open(work / "job.log", "w") as log:
                result = run_command(scenario.command(work, max_steps=max_steps), options,
                                     probes or make_probes(options), log, on_sample=on_sample, recorder=recorder)
        finally:
            if recorder is not None:
                recorder.close()
        verdict_at = time.time()
        fault = scenario.read_fault(work)
        report = result.outcome.report
        to_verdict = None
        if fault and report.verdict != Verdict.HEALTHY:
            to_verdict = round(verdict_at - fault["time"], 1)
        return ScenarioResult(
            scenario=scenario.name, expected_verdict=scenario.truth(hang_after),
            expected_culprits=tuple(scenario.culprit_ranks), expected_rule=scenario.expected_rule,
            verdict=report.verdict, culprits=tuple(report.culprit_ranks),
            rules=tuple(dict.fromkeys(f.rule for f in report.findings)),
            seconds_to_verdict=to_verdict, wall_s=round(time.monotonic() - started, 1), report=report,
        )
