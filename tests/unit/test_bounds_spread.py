"""Crafted but legal bundles whose cost grew with what they name, not with their bytes (issue 35,
item 9): each is a report or one line, within 1 GiB and seconds, in a child process as a user's
`hangdoc report` runs."""
from __future__ import annotations

import subprocess

import pytest

from tests.factories import crowded_v1_bundle, deep_stack_bundle, far_apart_bundle
from tests.unit.test_bounds import GIB, hangdoc_limited, one_error_line

# Bounds, fuzzers and builds of tens of seconds: the full suite runs them, the fast tier (`make fast`) does not.
pytestmark = pytest.mark.slow


SECONDS = 20      # an input's time budget (docs/bundle.md, "Budgets")


def test_a_200000_rank_v1_bundle_is_refused_by_its_process_count_before_decoding(tmp_path):
    # GIVEN one bundle of 200,000 rank processes: 820 KB of zstd, 226 MB of JSON (it took 77 s and 1.66 GB)
    path = tmp_path / "b.json.zst"
    path.write_bytes(crowded_v1_bundle(200_000))
    # WHEN `hangdoc report` reads it in a process limited to 1 GiB and 30 s
    rc, _, err = hangdoc_limited("report", str(path), memory=GIB, timeout=30)
    # THEN one line naming the budget of processes (not a MemoryError's "too large to load")
    assert one_error_line(rc, err) and "200,000 processes" in err[0], err[-5:]


def test_one_200000_frame_stack_named_by_2000_ranks_is_refused_by_the_frames_it_expands_to(tmp_path):
    # GIVEN a v2 bundle storing one 200,000-frame stack once, named by 2,000 ranks in two samples (18 KB)
    path = tmp_path / "b.json.zst"
    path.write_bytes(deep_stack_bundle(200_000, 2_000))
    # WHEN `hangdoc report` reads it in a process limited to 1 GiB and 30 s (it ran past 90 s)
    rc, _, err = hangdoc_limited("report", str(path), memory=GIB, timeout=30)
    # THEN one line: the frames the samples name in all, beyond the budget
    assert one_error_line(rc, err) and "800,000,000 stack frames" in err[0], err[-5:]


def test_html_of_samples_2e11_s_apart_is_a_small_page(tmp_path):
    # GIVEN a bundle whose samples run from -1e11 s to +1e11 s, each time within the budget
    path = tmp_path / "b.json"
    path.write_bytes(far_apart_bundle(1e11))
    # WHEN `hangdoc report --format html` renders it in a process limited to 1 GiB and 30 s (past 1.1 GB)
    rc, page, err = hangdoc_limited("report", str(path), "--format", "html", memory=GIB, timeout=30)
    # THEN a page of the usual size: ten ticks at most on its time axis
    assert rc in (0, 3) and page.startswith("<!DOCTYPE html>"), err[-5:]
    assert len(page) < 1_000_000 and page.count("text-anchor=") <= 12


@pytest.mark.parametrize("frames, ranks", [(750, 10_000), (488, 16_384)])
def test_one_stack_named_by_thousands_of_processes_within_every_budget_reports_within_20_s(tmp_path, frames, ranks):
    # GIVEN one interned stack named by `ranks` processes in one sample: 7.5 M and 8.0 M frames, just
    # under the 8 M budget, as are the processes under 16,384 (10,000 took 143 s, 2,000 took 7.4 s)
    path = tmp_path / "b.json.zst"
    path.write_bytes(deep_stack_bundle(frames, ranks, samples=1))
    for fmt in ("text", "html", "trace"):
        # WHEN `hangdoc report` renders it in each format that broke, in a child limited to 1 GiB
        try:
            rc, out, err = hangdoc_limited("report", str(path), "--format", fmt, memory=GIB, timeout=SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"--format {fmt} took more than {SECONDS} s")
        # THEN a report of every rank, within the documented 20 s
        assert rc == 0 and (f"{ranks}" in out or fmt == "trace" and "traceEvents" in out), (fmt, err[-5:])
