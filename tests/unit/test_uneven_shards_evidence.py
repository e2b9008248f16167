"""uneven-shards needs evidence that the rank's data is read from files and used up, not a barrier alone.

The uneven-shards golden bundle (rank 1 in the end-of-epoch barrier with no shard open, rank 0
still inside aishell004.tar) edited in code: the same stacks with the data in memory, or with
rank 1 still inside a shard, are a collective mismatch, not a rank that ran out of data.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from hangdoc.bundle.files import load_bundle
from hangdoc.model import Bundle, OpenFile
from hangdoc.report import judge

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def uneven() -> Bundle:
    return load_bundle(GOLDEN / "uneven-shards" / "bundle.json")


def with_files(bundle: Bundle, edit) -> Bundle:
    """Every sample's open files replaced by `edit(pid, files)`."""
    samples = []
    for snap in bundle.samples:
        procs = tuple(dataclasses.replace(s, proc=dataclasses.replace(s.proc, open_files=edit(s.pid, s.proc.open_files)))
                      if s.proc is not None else s for s in snap.processes)
        samples.append(dataclasses.replace(snap, processes=procs))
    return dataclasses.replace(bundle, samples=tuple(samples))


def fired(bundle: Bundle) -> set[str]:
    return {f.rule for f in judge(bundle).report.findings}


def test_the_recorded_rank_that_ran_out_of_shards_fires():
    # GIVEN the real job: rank 1 holds no shard, rank 0's worker is inside aishell004.tar
    assert {"uneven-shards", "collective-mismatch"} <= fired(uneven())


def test_a_rank_whose_dataset_lives_in_memory_and_that_calls_a_barrier_is_a_mismatch_only():
    # GIVEN the same stacks, but no process ever holds a data file (the dataset is in memory)
    bundle = with_files(uneven(), lambda pid, files: tuple(f for f in files if f.mode != "r"))
    # WHEN the rules run
    found = fired(bundle)
    # THEN the barrier is a collective mismatch, and nothing says the rank left the data loop
    assert "collective-mismatch" in found
    assert "uneven-shards" not in found


def test_a_rank_still_inside_its_shard_did_not_run_out():
    # GIVEN rank 1's workers holding a shard half read while rank 1 waits in the barrier
    bundle = uneven()
    rank1 = next(r for r in bundle.job.ranks if r.rank == 1)
    mine = {w.pid for w in bundle.job.children_of(rank1.pid)}
    shard = OpenFile(40, "/data/aishell003.tar", 200_000, 500_000, "r")
    bundle = with_files(bundle, lambda pid, files: files + (shard,) if pid in mine else files)
    # THEN the barrier is not read as the end of its data
    assert "uneven-shards" not in fired(bundle)


def test_a_rank_whose_workers_read_shards_earlier_and_hold_none_now_ran_out():
    # GIVEN no other rank's files in sight, but an earlier sample in which rank 1 was still in its
    # training step and its worker read a shard; none held since it went to the barrier
    bundle = with_files(uneven(), lambda pid, files: tuple(f for f in files if f.mode != "r"))
    rank0, rank1 = bundle.job.ranks
    worker = next(w.pid for w in bundle.job.children_of(rank1.pid))
    first = bundle.samples[0]
    stepping = dataclasses.replace(first.sample_of(rank0.pid), pid=rank1.pid)
    shard = OpenFile(40, "/data/aishell001.tar", 500_000, 500_000, "r")

    def earlier_of(s):
        if s.pid == worker:
            return dataclasses.replace(s, proc=dataclasses.replace(s.proc, open_files=s.proc.open_files + (shard,)))
        return stepping if s.pid == rank1.pid else s

    procs = tuple(earlier_of(s) for s in first.processes)
    earlier = dataclasses.replace(first, time=first.time - 2.0, processes=procs)
    bundle = dataclasses.replace(bundle, samples=(earlier,) + bundle.samples)
    # THEN its share is used up: uneven-shards fires (judged as a watch with --hang-after 2.5 would:
    # the recording holds about 3 s of quiet after that sample)
    assert "uneven-shards" in {f.rule for f in judge(bundle, hang_after=2.5).report.findings}
