"""Ranks that part ways in their own code: who left, read from evidence (a handler, a loop left, a
branch taken alone, an early return, counters ahead), where, the values that differ, and the fix
of that cause; "cannot tell" where nothing tells, never a preference for one collective.

The bundles are the golden recordings of tests/jobs/diverge_job.py (and the stall and uneven-shard
jobs), real gloo jobs written the way users' reports show them."""
from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from hangdoc.analyze.classify import DDP_BUFFERS, FSDP_GATHER, classify_rank
from hangdoc.bundle.files import load_bundle
from hangdoc.model import RankState, SplitCause, Stack, Thread
from hangdoc.render.text import render_text
from hangdoc.report import judge
from tests.factories import frame

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

CASES = {
    # case: (culprits, cause, words of the line where its path left)
    "diverge-swallowed": ((1,), SplitCause.SWALLOWED_EXCEPTION, "except Exception:"),
    "diverge-early-stop": ((2,), SplitCause.OWN_DECISION, "if early_stop:"),
    "diverge-handler": ((2,), SplitCause.HANDLER_COLLECTIVE, "except Exception as e:"),
    "diverge-ddp-validation": ((0,), SplitCause.WRAPPER_ON_ONE_RANK, "if rank == 0:"),
    "diverge-clock": ((0,), SplitCause.CLOCK_DECISION, "time.time() - last_ckpt > 2.0"),
    "diverge-rank0-gather": ((0,), SplitCause.RANK_BRANCH, "rank == 0"),
    "diverge-early-return": ((1,), SplitCause.EARLY_RETURN, "return None"),
    "uneven-shards": ((1,), SplitCause.UNEVEN_DATA, "for feats, labels in loader:"),
    "barrier-mismatch": ((1,), SplitCause.RANK_BRANCH, "rank == 1"),
}


def _judged(bundle):
    return judge(bundle)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rank_that_left_is_named_by_evidence_with_the_line_and_the_cause(case):
    # GIVEN a real job whose ranks parted ways in its own code
    bundle = load_bundle(GOLDEN / case / "bundle.json")
    culprits, cause, where = CASES[case]
    # WHEN it is judged
    judgement = _judged(bundle)
    split = judgement.diagnosis.divergence
    # THEN the rank that left is named, with the cause and the line where its path left
    assert judgement.report.culprit_ranks == culprits
    assert split is not None and split.cause == cause, split
    assert where in (split.at or ""), split.at
    mismatch = next(f for f in judgement.report.findings if f.rule == "collective-mismatch")
    assert any(e.startswith("who left: ") for e in mismatch.evidence)
    # AND the fix of uneven data is given only where the data ran out
    uneven = "same number of batches" in mismatch.fix
    assert uneven == (cause == SplitCause.UNEVEN_DATA), mismatch.fix


def test_the_values_that_sent_a_rank_off_are_shown():
    # GIVEN early stopping decided on each rank's own loss WHEN judged
    split = _judged(load_bundle(GOLDEN / "diverge-early-stop" / "bundle.json")).diagnosis.divergence
    # THEN the flag that differs is shown rank by rank, first
    assert split.differing[0] == "early_stop: False on ranks 0-1, True on rank 2"


def test_the_exception_a_handler_holds_is_named():
    split = _judged(load_bundle(GOLDEN / "diverge-handler" / "bundle.json")).diagnosis.divergence
    assert split.exception == "e: RuntimeError"


def _blind(bundle):
    """The bundle as an older hangdoc saved it: no source outlines, no locals."""
    samples = []
    for snapshot in bundle.samples:
        processes = []
        for sample in snapshot.processes:
            if sample.stack is not None:
                threads = tuple(dataclasses.replace(t, loop=None) for t in sample.stack.threads)
                sample = dataclasses.replace(sample, stack=dataclasses.replace(sample.stack, threads=threads))
            processes.append(sample)
        samples.append(dataclasses.replace(snapshot, processes=tuple(processes)))
    return dataclasses.replace(bundle, sources=(), samples=tuple(samples), logs=())


@pytest.mark.parametrize("case", ["diverge-swallowed", "barrier-mismatch", "diverge-clock"])
def test_two_ranks_with_nothing_to_tell_them_apart_are_never_split_by_a_preference(case):
    # GIVEN two ranks in different collectives and no evidence of who left (no source, no locals)
    bundle = _blind(load_bundle(GOLDEN / case / "bundle.json"))
    # WHEN judged
    judgement = _judged(bundle)
    # THEN no rank is named, and the report says nothing tells
    assert judgement.report.culprit_ranks == ()
    out = io.StringIO()
    render_text(judgement.report, out, width=200)
    assert "nothing tells which left" in out.getvalue().splitlines()[0]


def test_three_ranks_split_two_to_one_are_named_by_count_and_say_so():
    # GIVEN three ranks, two in one collective, and no other evidence
    bundle = _blind(load_bundle(GOLDEN / "diverge-ddp-validation" / "bundle.json"))
    # WHEN judged THEN the odd one is named, and the finding says it is by count alone
    judgement = _judged(bundle)
    assert judgement.report.culprit_ranks == (0,)
    assert judgement.diagnosis.divergence.why.startswith("by count alone")


@pytest.mark.parametrize(("name", "path", "expected"), [
    ("DistributedDataParallel._sync_buffers", "/venv/lib/python3.11/site-packages/torch/nn/parallel/distributed.py", DDP_BUFFERS),
    ("DistributedDataParallel._distributed_broadcast_coalesced", "/venv/lib/python3.11/site-packages/torch/nn/parallel/distributed.py", DDP_BUFFERS),
    ("FlatParamHandle._all_gather_flat_param", "/venv/lib/python3.11/site-packages/torch/distributed/fsdp/_flat_param.py", FSDP_GATHER),
])
def test_the_wrappers_own_collectives_are_collectives_named_in_words(name, path, expected):
    # GIVEN a rank idle in a wrapper's own collective, under the job's line
    frames = (frame(name, path, 10), frame("main", "/job/train.py", 40))
    stack = Stack(threads=(Thread(tid=1, name="MainThread", active=False, owns_gil=False, frames=frames),))
    from hangdoc.model import ProcSample
    sample = ProcSample(pid=1, alive=True, stack=stack)
    # WHEN classified THEN it waits in that collective, said in words
    reading = classify_rank(sample)
    assert reading.state == RankState.COLLECTIVE and reading.detail == expected


def _without_sources(bundle):
    return dataclasses.replace(bundle, sources=())


def test_a_rank_ahead_in_the_loop_counters_is_the_one_that_skipped_even_without_the_source():
    # GIVEN the swallowed gather, saved without the source outlines (the file was unreadable)
    bundle = _without_sources(load_bundle(GOLDEN / "diverge-swallowed" / "bundle.json"))
    # WHEN judged THEN the counters still tell: rank 1 is a step ahead, so it skipped the gather
    split = _judged(bundle).diagnosis.divergence
    assert split.left == (1,) and split.cause == SplitCause.SKIPPED
    assert "step 13 against 12" in split.why


def test_the_only_rank_whose_output_printed_an_exception_is_the_one_that_left():
    # GIVEN two ranks in different collectives, nothing in their code to tell them apart, and
    # torchrun's per-rank output where rank 1 alone printed a traceback
    from hangdoc.model import LogTail
    bundle = _blind(load_bundle(GOLDEN / "barrier-mismatch" / "bundle.json"))
    lines = ("[rank0]:step 5 loss 0.1", "[rank1]:Traceback (most recent call last):",
             '[rank1]:  File "/job/train.py", line 40, in metrics', "[rank1]:    r = hits / total",
             "[rank1]:ZeroDivisionError: division by zero")
    bundle = dataclasses.replace(bundle, logs=(LogTail("job.log", lines),))
    # WHEN judged THEN rank 1 is named, and the exception it printed
    judgement = _judged(bundle)
    assert judgement.report.culprit_ranks == (1,)
    assert judgement.diagnosis.divergence.exception == "ZeroDivisionError: division by zero"


def test_an_exception_printed_without_a_rank_prefix_names_nobody():
    # GIVEN the same traceback, but in output with no rank prefix (it could be any rank's)
    from hangdoc.model import LogTail
    bundle = _blind(load_bundle(GOLDEN / "barrier-mismatch" / "bundle.json"))
    lines = ("Traceback (most recent call last):", '  File "/job/train.py", line 40, in metrics',
             "ZeroDivisionError: division by zero")
    bundle = dataclasses.replace(bundle, logs=(LogTail("job.log", lines),))
    # WHEN judged THEN it is no evidence of who left
    assert _judged(bundle).report.culprit_ranks == ()
