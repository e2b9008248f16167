"""`run`'s copy of the job's output once hangdoc ends the job: the launcher's SignalException
traceback is left out of the echo and the kept tail, and one line takes its place; any other
traceback is still the job's (issue 37, item 6)."""
from __future__ import annotations

import io
import os
import time

from hangdoc.live.runner import OutputTail

TEARDOWN = """W1127 api.py:753] Received 15 death signal, shutting down workers
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "torch/distributed/elastic/agent/server/api.py", line 923, in _invoke_run
    time.sleep(monitor_interval)
  File "torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate_process_handler
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 611 got signal: 15
"""


def _tail_over(before: str, after: str) -> tuple[OutputTail, io.StringIO]:
    """The job printed `before`, then hangdoc began to end it, then the job printed `after`."""
    read, write = os.pipe()
    sink = io.StringIO()
    tail = OutputTail(os.fdopen(read, "rb"), sink)
    os.write(write, before.encode())
    deadline = time.monotonic() + 5
    while len(tail.lines) < before.count("\n") and time.monotonic() < deadline:
        time.sleep(0.01)
    tail.ending()
    os.write(write, after.encode())
    os.close(write)
    tail.join()
    tail.say_ended()
    return tail, sink


def test_the_launchers_signal_exception_after_hangdoc_ends_the_job_is_left_out():
    # GIVEN a job that printed a step, then, as hangdoc ended it, torchrun's teardown
    tail, sink = _tail_over("step 1 loss 0.5\n", TEARDOWN)
    # THEN the echo keeps the step and torchrun's warning, not the traceback, and says who ended the job
    assert sink.getvalue().splitlines() == [
        "step 1 loss 0.5", "W1127 api.py:753] Received 15 death signal, shutting down workers",
        "hangdoc: the job was ended by hangdoc, not by a failure of its own; its launcher's SignalException "
        "traceback (7 lines) is left out"]
    # AND the tail the report reads holds no line of it
    assert not any("Traceback" in line or "SignalException" in line for line in tail.lines)


def test_the_same_traceback_before_hangdoc_ends_the_job_is_the_jobs_own():
    # GIVEN the same lines printed while the job ran on its own
    tail, sink = _tail_over(TEARDOWN, "")
    # THEN they are all shown and kept
    assert sink.getvalue().startswith(TEARDOWN)
    assert any("SignalException: Process 611" in line for line in tail.lines)


def test_another_traceback_after_the_end_is_shown():
    # GIVEN a traceback of the job's own code printed as it was ended
    crash = "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\nValueError: bad batch\n"
    tail, sink = _tail_over("", crash)
    # THEN it is echoed and kept, and nothing is said to be left out
    assert sink.getvalue() == crash + "hangdoc: the job was ended by hangdoc, not by a failure of its own\n"
    assert "ValueError: bad batch" in tail.lines


def test_a_dying_workers_nul_is_echoed_as_it_came_and_left_out_of_the_lines_kept():
    # GIVEN a DataLoader worker's dying line, written with its C string's NUL, then its rank's traceback
    out = ("ERROR: Unexpected segmentation fault encountered in worker.\n\x00[rank1]: Traceback (most recent "
           "call last):\n[rank1]: ConnectionResetError: [Errno 104] Connection reset by peer\n")
    tail, sink = _tail_over(out, "")
    # THEN the echo is the job's output byte for byte, and the kept line keeps its [rank1] prefix first
    assert sink.getvalue().startswith(out)
    assert list(tail.lines)[1] == "[rank1]: Traceback (most recent call last):"
