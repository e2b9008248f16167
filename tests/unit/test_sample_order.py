"""Samples are read in time order: a bundle whose samples are reversed, shuffled, dated twice or
dated far outside the watch gives the verdict of the same samples in order, with one warning."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hangdoc.base.errors import BadBundle
from hangdoc.bundle.files import load_bundle, save_bundle
from hangdoc.report import judge

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def saved(tmp_path, bundle, name="b.json"):
    return load_bundle(save_bundle(bundle, tmp_path / name))


@pytest.mark.parametrize("case", ["barrier-mismatch", "healthy-finished", "slow-data"])
def test_reversed_samples_give_the_verdict_of_the_ordered_ones(tmp_path, case):
    # GIVEN a golden bundle, and the same with its samples stored in reverse
    bundle = load_bundle(GOLDEN / case / "bundle.json")
    reversed_ = dataclasses.replace(bundle, samples=bundle.samples[::-1])
    # WHEN it is read back and judged
    read = saved(tmp_path, reversed_)
    # THEN the samples are in time order, the verdict and culprits are the ordered bundle's, and one line says so
    assert [s.time for s in read.samples] == sorted(s.time for s in bundle.samples)
    want, got = judge(bundle).report, judge(read).report
    assert (got.verdict, got.culprit_ranks) == (want.verdict, want.culprit_ranks)
    assert len(read.set_aside) == 1 and "read in time order" in read.set_aside[0]


def test_one_sample_dated_far_back_is_set_aside_and_decides_nothing(tmp_path):
    # GIVEN a healthy run's bundle with one sample dated -1e11 s
    bundle = load_bundle(GOLDEN / "healthy-finished" / "bundle.json")
    hostile = dataclasses.replace(bundle.samples[3], time=-1e11)
    edited = dataclasses.replace(bundle, samples=bundle.samples[:3] + (hostile,) + bundle.samples[4:])
    # WHEN read and judged
    read = saved(tmp_path, edited)
    report = judge(read).report
    # THEN that sample is set aside with one line, and the verdict is the healthy one
    assert len(read.samples) == len(bundle.samples) - 1
    assert read.set_aside == (f"of its {len(bundle.samples)} samples (stored out of time order): read in time order; "
                              "1 dated outside the capture set aside, never read",)
    assert report.verdict == judge(bundle).report.verdict


def test_a_sample_dated_twice_is_set_aside(tmp_path):
    bundle = load_bundle(GOLDEN / "barrier-mismatch" / "bundle.json")
    twin = dataclasses.replace(bundle.samples[-1], time=bundle.samples[-2].time)
    read = saved(tmp_path, dataclasses.replace(bundle, samples=bundle.samples[:-1] + (twin,)))
    assert len(read.samples) == len(bundle.samples) - 1
    assert "1 dated the same as another set aside" in read.set_aside[0]


def test_an_ordered_bundle_is_read_as_it_is(tmp_path):
    bundle = load_bundle(GOLDEN / "barrier-mismatch" / "bundle.json")
    assert bundle.set_aside == () and saved(tmp_path, bundle).samples == bundle.samples


def test_no_sample_within_the_capture_is_refused(tmp_path):
    bundle = load_bundle(GOLDEN / "barrier-mismatch" / "bundle.json")
    far = tuple(dataclasses.replace(s, time=bundle.created + 1e6 + i) for i, s in enumerate(bundle.samples))
    with pytest.raises(BadBundle, match="none of its .* samples is dated within the capture"):
        saved(tmp_path, dataclasses.replace(bundle, samples=far))
