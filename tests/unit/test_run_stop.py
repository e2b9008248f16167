"""`run` ends the job it started; a Ctrl-C or SIGTERM that comes while it is being ended never
loses the run's report: the signal waits for the end (stop_job), then the run stops with it."""
from __future__ import annotations

import io

from hangdoc.base.errors import Interrupted
from hangdoc.collect.snapshot import Probes
from hangdoc.live import runner
from hangdoc.live.options import WatchOptions
from hangdoc.model import StopReason, Verdict


def test_a_sigterm_while_the_job_is_ended_stops_the_run_with_its_report(monkeypatch):
    # GIVEN a run of a real command that outlives its --timeout, and a SIGTERM that comes while
    # hangdoc ends it (stop_job re-raises it once the job is gone)
    real_stop = runner.stop_job

    def stop_then_signalled(job, *args, **kwargs):
        real_stop(job, *args, **kwargs)
        raise Interrupted(143)

    monkeypatch.setattr(runner, "stop_job", stop_then_signalled)
    monkeypatch.setattr(runner, "_hold_signals", lambda: None)
    # WHEN the run ends
    result = runner.run_command(["sleep", "30"], WatchOptions(timeout_s=0.5, gpu=False), Probes(), io.StringIO())
    # THEN the job is gone, the run leaves with 143 and still has its report (interrupted, not lost)
    assert result.job_exit_code is not None
    assert result.interrupted == 143 and result.outcome.exit_code == 143
    assert result.outcome.reason is StopReason.INTERRUPTED
    assert result.outcome.report.verdict == Verdict.INTERRUPTED
