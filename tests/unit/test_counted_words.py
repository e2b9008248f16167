"""Counts read as English: "rank 1", "1 rank x 2 workers", never "(ranks 1)", "1 ranks" or a "?"
standing for a count nobody gave (issue 37, item 6)."""
from __future__ import annotations

from hangdoc.check.env import check_env
from hangdoc.check.host import HostProbes
from hangdoc.check.model import NvmlFacts
from hangdoc.check.sections import layout


def _env_heading(**launch) -> str:
    probes = HostProbes(arch="x86_64", env={}, nvml=lambda: NvmlFacts(False, "none"))
    return layout(check_env(probes=probes, **launch)).heading


def test_check_env_heading_counts_one_rank_and_leaves_out_an_unknown_worker_count():
    # GIVEN `hangdoc check env` with one rank and no --num-workers
    heading = _env_heading(nproc_per_node=1)
    # THEN the heading says "1 rank" and no "?" workers
    assert heading.endswith(", 1 rank"), heading
    assert "?" not in heading and "1 ranks" not in heading


def test_check_env_heading_counts_ranks_and_workers_in_the_singular_and_plural():
    assert _env_heading(nproc_per_node=1, num_workers=1).endswith(", 1 rank x 1 worker")
    assert _env_heading(nproc_per_node=2, num_workers=4).endswith(", 2 ranks x 4 workers")
