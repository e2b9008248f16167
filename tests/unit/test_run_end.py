"""`run` of a command that ends between two rounds: the report is read from a round that saw it
end, never from the round before, when it still ran (a failed command read as healthy)."""
from __future__ import annotations

import io
import os
import sys
import time

from hangdoc.collect.exits import ExitWatcher
from hangdoc.collect.snapshot import Probes
from hangdoc.live import runner
from hangdoc.live.options import WatchOptions
from hangdoc.live.watcher import Watcher
from hangdoc.model import Verdict

FAILS = ("import os, sys, time\n"
         "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n"
         "raise SystemExit('RuntimeError: the upload failed')")


def _exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_a_command_that_fails_right_after_a_round_is_a_crash(monkeypatch, tmp_path):
    # GIVEN a lone Python command that fails with code 1, whose exit no pidfd reports, and which
    # exits just after the second round that saw it running (before `run` asks whether it ended)
    go = tmp_path / "go"
    real_start, real_step = Watcher.start, Watcher.step

    def start_without_pidfds(self):
        self.exit_watcher = ExitWatcher(proc_root=str(self.probes.procfs.root), sleep=self.sleep, pidfd_open=None)
        return real_start(self)

    def read_round_then_let_it_exit(self):
        # the round's reading is done (the command seen running); `run` asks whether it ended next
        result = real_step(self)
        if len(self.samples) >= 2:
            go.touch()
            deadline = time.monotonic() + 10
            while not _exited(self.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        return result

    monkeypatch.setattr(Watcher, "start", start_without_pidfds)
    monkeypatch.setattr(Watcher, "step", read_round_then_let_it_exit)
    # WHEN `run` watches it to its end
    result = runner.run_command([sys.executable, "-c", FAILS, str(go)], WatchOptions(interval_s=0.3, gpu=False, timeout_s=30),
                                Probes(), io.StringIO())
    # THEN the command's failure is a crash (run exits 4), not a healthy run that kept its code 1
    assert result.job_exit_code == 1
    assert result.outcome.report.verdict == Verdict.CRASH, result.outcome.report
    assert result.outcome.exit_code == 4
    # AND it was watched, and the bundle's last round saw it gone
    bundle = result.outcome.bundle
    assert len(bundle.samples) >= 3 and [p.pid for p in bundle.job.ranks] != [os.getpid()]
    assert not bundle.last.sample_of(bundle.job.ranks[0].pid).alive
