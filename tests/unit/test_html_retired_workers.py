"""The HTML timeline opens a rank with the workers it has now; the workers of ended epochs are one
folded row under it, closed, not a lane each (issue 37, item 6)."""
from __future__ import annotations

import dataclasses
import re

from hangdoc.render.html import report_html
from hangdoc.report import judge
from test_worker_fates import epochs_job


def _blocks(page: str) -> list[str]:
    return re.findall(r'<div class="rank-block[^"]*">.*?\n</div>', page, flags=re.S)


def test_retired_workers_of_earlier_epochs_are_one_closed_row_under_the_live_ones():
    # GIVEN 2 ranks after 10 epochs, each rank's 2 live workers and the 18 its earlier epochs forked,
    # rank 0 marked the culprit (its block opens)
    report = judge(epochs_job()).report
    lanes = tuple(dataclasses.replace(lane, culprit=lane.rank == 0) for lane in report.lanes)
    # WHEN the page is written
    page = report_html(dataclasses.replace(report, lanes=lanes))
    # THEN each rank block opens on its 2 live workers' lanes
    for rank, block in enumerate(_blocks(page)):
        first = re.search(r"<details class=\"workers\"( open)?><summary>(.*?)</summary>", block)
        assert first.group(2) == f"2 DataLoader workers of rank {rank}", first.group(0)
        assert bool(first.group(1)) == (rank == 0)
        live = block[first.end():block.index("</details>", first.end())]
        assert live.count('class="lane worker"') == 2
        # AND the 18 retired ones are one closed row that names them, their latest 16 lanes inside
        folded = re.search(r'<details class="workers retired"><summary>(.*?)</summary>(.*?)</details>', block, re.S)
        assert folded.group(1) == f"18 retired workers of rank {rank}'s earlier epochs (the latest 16 drawn)"
        assert folded.group(2).count('class="lane worker"') == 16
        assert "worker ?" not in live


def test_a_rank_with_no_retired_worker_has_no_folded_row():
    # GIVEN one epoch: every worker is live
    page = report_html(judge(epochs_job(epochs=1)).report)
    # THEN no retired row is drawn
    assert "retired" not in page
