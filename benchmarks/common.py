"""What the bench's sections share: a scenario job held open, the machine's line, a table, the
results written as JSON, and SIGTERM read as Ctrl-C."""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from hangdoc.scenarios import SCENARIOS
from hangdoc.scenarios.launch import start_job, stop_job, wait_for


def write_results(results: dict, out: str | Path, name: str) -> Path:
    """A section run on its own: its results as OUT/NAME.json, said on stdout."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"written to {path}")
    return path


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}"


def table(title: str, header: list[str], rows: list[list]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells[1:]]
    return "\n".join(lines)


class Job:
    """A scenario job held open for measurements; always ended."""

    def __init__(self, name: str, **changes):
        self.scenario = dataclasses.replace(SCENARIOS[name], **changes)
        self.tmp = tempfile.TemporaryDirectory(prefix="hangdoc-bench-")
        self.work = Path(self.tmp.name)

    def __enter__(self):
        self.scenario.prepare(self.work)
        self.job = start_job(self.scenario.command(self.work, max_steps=10 ** 7),
                             log_path=self.work / "job.log")
        if not wait_for(self.scenario.ready_markers(self.work), self.job, timeout=90):
            self.__exit__()
            raise RuntimeError(f"{self.scenario.name} did not start; see its log")
        time.sleep(1.0)   # let every worker finish starting
        return self

    def __exit__(self, *exc):
        stop_job(self.job)
        self.tmp.cleanup()


def ended_by_sigterm() -> None:
    """SIGTERM (a `timeout`, a CI's cancel) ends the bench as Ctrl-C would: every job it started is
    stopped on the way out (the `with Job(...)` blocks run their exits), none is left running."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
