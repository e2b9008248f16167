"""rank-stopped beyond its golden case: a stopped worker, and the stops that are not a stopped rank
(a stop continued, the tracing stop of a stack read, a job that still steps)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from hangdoc.bundle.files import load_bundle
from hangdoc.model import Verdict
from hangdoc.report.judge import judge

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def golden(case: str):
    return load_bundle(GOLDEN / case / "bundle.json")


def stopped(bundle, pid: int, first: int, last: int | None = None, state: str = "T"):
    """The bundle with `pid` read in `state` (its CPU flat) at rounds first..last."""
    samples = list(bundle.samples)
    cpu = samples[first].sample_of(pid).proc.utime_s
    for i in range(first, len(samples) if last is None else last + 1):
        procs = tuple(dataclasses.replace(s, proc=dataclasses.replace(s.proc, state=state, utime_s=cpu))
                      if s.pid == pid and s.proc is not None else s for s in samples[i].processes)
        samples[i] = dataclasses.replace(samples[i], processes=procs)
    return dataclasses.replace(bundle, samples=tuple(samples))


def pid_of(bundle, rank: int, worker: int | None = None) -> int:
    owner = next(p.pid for p in bundle.job.ranks if p.rank == rank)
    if worker is None:
        return owner
    return next(w.pid for w in bundle.job.children_of(owner) if w.worker_index == worker)


def findings(bundle) -> dict:
    report = judge(bundle).report
    return report, {f.rule: f for f in report.findings}


def test_a_stopped_worker_of_a_rank_waiting_on_its_data_is_named_and_the_stall_stands_back():
    # GIVEN stuck-fetch (rank 1 waits on its DataLoader), its worker 0 stopped from round 2 on
    bundle = golden("stuck-fetch")
    worker = pid_of(bundle, 1, 0)
    # WHEN judged
    report, found = findings(stopped(bundle, worker, 2))
    # THEN rank-stopped names the worker, and neither the stall nor the straggler gives its own fix
    assert report.verdict == Verdict.HANG
    finding = found["rank-stopped"]
    assert finding.ranks == (1,) and finding.title.startswith("Rank 1's DataLoader worker 0 (pid ")
    assert any("rank 1 waits for its data in DataLoader.__next__" in e for e in finding.evidence)
    assert "dataloader-stall" not in found
    assert "rank-stopped" in found["collective-straggler"].fix


def test_a_rank_continued_after_a_stop_is_not_named():
    # GIVEN compute-straggler's rank 1 stopped for two rounds, then computing again at the newest
    bundle = golden("compute-straggler")
    rank = pid_of(bundle, 1)
    last = len(bundle.samples) - 2
    # WHEN judged
    _, found = findings(stopped(bundle, rank, 2, last))
    # THEN it is no stopped rank: its newest sample runs
    assert "rank-stopped" not in found


def test_the_tracing_stop_of_a_stack_read_is_not_a_stopped_rank():
    # GIVEN compute-straggler's rank 1 read in state t (ptrace's stop, as a stack read makes) at every round
    bundle = golden("compute-straggler")
    # WHEN judged
    _, found = findings(stopped(bundle, pid_of(bundle, 1), 0, state="t"))
    # THEN rank-stopped stays quiet
    assert "rank-stopped" not in found


def test_a_stopped_rank_of_a_job_that_is_not_hung_is_not_named():
    # GIVEN checkpoint-pause (healthy: rank 1 waits in a barrier while rank 0 writes), rank 0 read
    # in state T at its last two samples: a stop begun as the watch ended, the job stepping before it
    bundle = golden("checkpoint-pause")
    # WHEN judged
    report, found = findings(stopped(bundle, pid_of(bundle, 0), len(bundle.samples) - 2))
    # THEN two samples make no hang of a job that stepped, and no rank-stopped finding without one
    assert report.verdict != Verdict.HANG
    assert "rank-stopped" not in found
