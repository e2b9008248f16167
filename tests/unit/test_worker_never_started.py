"""A DataLoader worker forked while another thread of its rank held a lock: it sleeps in a futex
from its first instant and never reaches Python (py-spy finds no interpreter in it). Seen in a
Lightning job of the loop-style matrix, at the fork of a new validation loader's worker."""
from __future__ import annotations

import dataclasses

from hangdoc.model import Role
from hangdoc.report.judge import judge
from tests.factories import WORKER_IDLE, _stack, node_bundle

T0 = 1_700_000_000.0
NO_INTERPRETER = "stack: could not collect: Error: Failed to find a python interpreter in the .data section"


def stalled_job(never_started: bool, asked: bool = True):
    """Two ranks for 40 s: rank 0 in all_reduce, rank 1 waiting on its DataLoader, whose worker 0
    waits for work on its index queue and whose worker 1 is asleep in a futex with no CPU: with no
    stack to read (`never_started`; `asked`: py-spy tried and failed, else only /proc was read), or
    at a Python frame on its queue."""
    bundle = node_bundle(0, 1, 1, T0, samples=21, workers=2, ranks_per_node=2)
    workers = [p for p in bundle.job.processes if p.role is Role.WORKER and p.rank == 1]
    first, second = workers
    samples = []
    for snapshot in bundle.samples:
        rows = []
        for s in snapshot.processes:
            if s.pid in (first.pid, second.pid):
                stat = dataclasses.replace(s.proc, utime_s=0.0 if s.pid == second.pid else 0.4, stime_s=0.0,
                                           io=dataclasses.replace(s.proc.io, rchar=4096, wchar=0), num_threads=1,
                                           open_files=())
                if s.pid == second.pid and never_started:
                    s = dataclasses.replace(s, proc=stat, stack=None, errors=(NO_INTERPRETER,) if asked else ())
                else:
                    s = dataclasses.replace(s, proc=stat, stack=_stack(WORKER_IDLE, s.pid, False, False))
            rows.append(s)
        samples.append(dataclasses.replace(snapshot, processes=tuple(rows)))
    return dataclasses.replace(bundle, samples=tuple(samples)), second


def test_a_worker_asleep_in_a_futex_since_its_fork_with_no_python_is_named_deadlocked():
    # GIVEN a hang whose culprit, rank 1, waits on its DataLoader, one of whose workers has slept in a
    # futex with no CPU at every sample and has no Python stack py-spy can read
    bundle, stuck = stalled_job(never_started=True)
    # WHEN judged (hang after 30 s)
    report = judge(bundle, hang_after=30.0).report
    # THEN a hang of rank 1, and worker-deadlock names that worker as never started, with the fix
    assert (report.verdict, report.culprit_ranks) == ("hang", (1,)), report.verdict
    found = next((f for f in report.findings if f.rule == "worker-deadlock"), None)
    assert found is not None, [f.rule for f in report.findings]
    assert f"pid {stuck.pid}" in " ".join(found.evidence), found.evidence
    assert "never reached Python" in found.title, found.title
    assert any("no Python interpreter" in line for line in found.evidence), found.evidence


def test_a_worker_waiting_on_its_index_queue_is_no_deadlock():
    # GIVEN the same hang with both workers waiting for work on their index queues (Python frames read)
    bundle, _ = stalled_job(never_started=False)
    # WHEN judged THEN worker-deadlock does not fire: waiting for work is no lock
    report = judge(bundle, hang_after=30.0).report
    assert "worker-deadlock" not in [f.rule for f in report.findings]


def test_a_worker_whose_stack_was_never_asked_for_is_not_said_to_have_never_reached_python():
    # GIVEN the same hang, the futex-bound worker read only through /proc (no stack asked of it)
    bundle, _ = stalled_job(never_started=True, asked=False)
    # WHEN judged THEN worker-deadlock does not claim it never reached Python
    report = judge(bundle, hang_after=30.0).report
    assert "worker-deadlock" not in [f.rule for f in report.findings]
