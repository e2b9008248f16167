"""Every figure a report prints agrees with the ones it sits with: one thread said one way, a
threshold's words say what it was learned from (a gap between samples is never a step's time),
each rank's shares add up to its whole (or name the rest), a fix fits the job's backend and the
finding above it. Held over every golden bundle, through the judge, in every format."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from figures import assert_figures_agree, texts
from hangdoc.analyze.jobfacts import backend
from hangdoc.bundle.files import load_bundle
from hangdoc.report import judge

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "bundle.json").exists())


def still_main_thread(bundle, pid: int):
    """The bundle with `pid`'s main thread neither running nor waking from its first sample on."""
    first = next(p.proc.main_thread for p in bundle.samples[0].processes if p.pid == pid)

    def frozen(sample):
        procs = tuple(dataclasses.replace(p, proc=dataclasses.replace(p.proc, main_thread=first))
                      if p.pid == pid and p.proc is not None and p.proc.main_thread is not None else p
                      for p in sample.processes)
        return dataclasses.replace(sample, processes=procs)
    return dataclasses.replace(bundle, samples=tuple(frozen(s) for s in bundle.samples))


def test_a_rank_that_neither_ran_nor_woke_in_its_wait_is_asleep_not_never_went_to_sleep():
    # GIVEN a hang whose waiting rank 0's main thread used no CPU and never woke over the wait
    bundle = load_bundle(GOLDEN / "gpu-gloo-cuda" / "bundle.json")
    rank0 = next(p.pid for p in bundle.job.ranks if p.rank == 0)
    report = judge(still_main_thread(bundle, rank0)).report
    # WHEN collective-straggler cites the waiting rank
    evidence = " ".join(e for f in report.findings for e in f.evidence)
    # THEN it says the thread slept in its wait, as the witnesses do, never that it did not sleep
    assert "never went to sleep" not in evidence
    assert "its main thread was asleep in its wait (0.00 s of CPU, no wake-up)" in evidence


def test_a_threshold_learned_from_the_samples_is_not_called_a_step_time():
    # GIVEN a job whose threshold was learned from the loop's moves between samples
    report = judge(load_bundle(GOLDEN / "gpu-gloo-cuda" / "bundle.json")).report
    assert report.threshold.source == "learned"
    text = texts(report)["text"]
    # THEN the report says the gap between samples, never that the loop moved "at least every" so often
    assert "moved at least every" not in text and "steps up to" not in text
    assert "the samples saw a rank's loop move at most 2.0 s apart (11 moves seen" in text
    assert "a gap between samples, not a step's time" in text


@pytest.mark.parametrize("case", CASES)
def test_every_golden_report_agrees_with_itself(case):
    # GIVEN a golden bundle, judged
    bundle = load_bundle(GOLDEN / case / "bundle.json")
    report = judge(bundle).report
    assert report.backend == backend(bundle)
    # THEN written in every format, its figures agree (tests/figures.py says how each is checked):
    # shares add up, one thread one way, no sample gap called a step, no NCCL advice on gloo, a fix
    # that follows the finding above it, a status line of 100 columns, Markdown escaped alike
    assert_figures_agree(report, case)


def test_a_straggler_with_longer_samples_is_told_its_inputs_are_bigger():
    # GIVEN the newcomer's job: a corpus sorted by length cut into contiguous chunks, rank 1's samples 2.3x longer
    report = judge(load_bundle(GOLDEN / "longer-samples" / "bundle.json")).report
    # WHEN slow-rank names the straggler
    finding = next(f for f in report.findings if f.rule == "slow-rank")
    # THEN its title, its evidence and its fix say that its inputs are bigger, with the lengths its loop held
    assert finding.ranks == (1,) or list(finding.ranks) == [1]
    assert "its inputs are bigger" in finding.title
    said = next(e for e in finding.evidence if e.startswith("its inputs are bigger than the others'"))
    assert re.search(r"seq_len \d+ against \d+", said), said
    assert finding.fix.startswith("Its inputs are bigger than the others' (longer samples, larger batches)")


def test_a_straggler_that_only_computes_longer_is_not_said_to_have_bigger_inputs():
    # GIVEN compute-2x: rank 1 computes twice as long a step on inputs like the others'
    report = judge(load_bundle(GOLDEN / "compute-2x" / "bundle.json")).report
    finding = next(f for f in report.findings if f.rule == "slow-rank")
    # THEN nothing is said of its inputs
    assert "inputs are bigger" not in finding.title + " ".join(finding.evidence) + finding.fix
