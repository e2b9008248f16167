"""worker-died without a log line: a worker seen alive, then gone, under a rank that waits for data."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from hangdoc.report import judge
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Bundle, ProcSample, Role

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def stuck_fetch() -> tuple[Bundle, int]:
    """The real stuck-fetch hang and the pid of rank 1's worker 0 (the one asleep in recv)."""
    bundle = load_bundle(GOLDEN / "stuck-fetch" / "bundle.json")
    rank1 = next(p for p in bundle.job.ranks if p.rank == 1)
    worker = next(w for w in bundle.job.children_of(rank1.pid) if w.role is Role.WORKER and w.worker_index == 0)
    return bundle, worker.pid


def gone_from(bundle: Bundle, pid: int, last: int) -> Bundle:
    """`pid` missing (not alive) in the last `last` samples, as when it is killed without a trace."""
    samples = list(bundle.samples)
    for i in range(len(samples) - last, len(samples)):
        procs = tuple(ProcSample(pid, False, errors=("proc: could not collect: the process has exited",))
                      if s.pid == pid else s for s in samples[i].processes)
        samples[i] = dataclasses.replace(samples[i], processes=procs)
    return dataclasses.replace(bundle, samples=tuple(samples), logs=())


def rules(bundle: Bundle) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in judge(bundle).report.findings:
        out.setdefault(f.rule, []).append(f)
    return out


def test_a_worker_that_vanishes_under_a_waiting_rank_died():
    # GIVEN rank 1 waiting for data and its worker 0 gone for the last 3 samples, no log line
    bundle, pid = stuck_fetch()
    found = rules(gone_from(bundle, pid, 3))
    # THEN worker-died names it (vanished), and dataloader-stall defers to it
    [died] = found["worker-died"]
    assert died.ranks == (1,) and f"(pid {pid})" in died.title and "vanished" in died.title
    assert any("gone at" in e for e in died.evidence)
    assert "dataloader-stall" not in found


def test_a_worker_replaced_by_a_new_one_ended_its_epoch():
    # GIVEN the same disappearance, but a worker of rank 1 started after it (a new epoch)
    bundle, pid = stuck_fetch()
    bundle = gone_from(bundle, pid, 3)
    rank1 = next(p for p in bundle.job.ranks if p.rank == 1)
    sibling = next(w for w in bundle.job.children_of(rank1.pid) if w.role is Role.WORKER and w.pid != pid)
    newer = dataclasses.replace(sibling, start_time=bundle.last.time)
    job = dataclasses.replace(bundle.job, processes=tuple(newer if p.pid == sibling.pid else p
                                                          for p in bundle.job.processes))
    # THEN it is not a death
    assert "worker-died" not in rules(dataclasses.replace(bundle, job=job))


def test_workers_gone_with_their_job_did_not_die():
    # GIVEN a healthy job that finished while watched (its workers exit with their ranks)
    bundle = load_bundle(GOLDEN / "healthy-finished" / "bundle.json")
    # THEN no worker died
    assert "worker-died" not in rules(bundle)
