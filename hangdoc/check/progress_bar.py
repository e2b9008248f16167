"""Progress of a long pass on stderr: a rich bar on a terminal, a line every few seconds elsewhere.

stdout stays the report alone; a pass over a few shards says nothing.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

QUIET_BELOW = 200        # items: shorter passes finish before anyone wonders
LINE_EVERY_S = 10.0      # not a terminal (a CI log): one line this often


class Progress:
    """Call with (done, total); `close()` when the pass ends."""

    def __init__(self, what: str, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.what = what
        self.out = out or sys.stderr
        self.clock = clock
        self._bar = None
        self._task = None
        self._last = clock()

    def __call__(self, done: int, total: int) -> None:
        if total < QUIET_BELOW:
            return
        if getattr(self.out, "isatty", lambda: False)():
            if self._bar is None:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TimeRemainingColumn

                self._bar = Bar(f"hangdoc: {self.what}", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                console=Console(file=self.out), transient=True)
                self._bar.start()
                self._task = self._bar.add_task(self.what, total=total)
            self._bar.update(self._task, completed=done)
        elif self.clock() - self._last >= LINE_EVERY_S or done == total:
            self._last = self.clock()
            print(f"hangdoc: {self.what}: {done:,} of {total:,}", file=self.out, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
