"""Frame and function names in a report's Markdown prose (titles, evidence lines, the headline)
render as the names they are: `DataLoader.__next__` is not `DataLoader.**next**`, a `*` is no
emphasis (issue 37, item 6)."""
from __future__ import annotations

import re

import pytest

from hangdoc.model import Finding, Severity
from hangdoc.render.escape import md_cell, md_text
from hangdoc.render.finding import finding_markdown
from test_markdown_escape import RENDER, visible

NAMES = [
    "dataloader-wait in DataLoader.__next__ for 4 s at _MultiProcessingDataLoaderIter._try_get_data",
    "_BaseDataLoaderIter.__next__ > Dataset.__getitem__ > __init__",
    "frames: _worker_loop > _IterableDatasetFetcher.fetch > *args wrapper_ > f(*a, **kw)",
    "a path /data/__cache__/shard_000*.tar and ~/tmp ~x~",
]


@pytest.mark.parametrize("text", NAMES)
def test_names_with_underscores_and_stars_render_as_written(text):
    # GIVEN a line of prose holding Python names, dunders and globs
    html = RENDER(md_text(text))
    # WHEN a CommonMark renderer shows it THEN no emphasis is made of it and every character shows
    assert set(re.findall(r"<([a-z]+)", html)) <= {"p"}, (md_text(text), html)
    assert visible(html) == text, (md_text(text), html)


def test_names_inside_words_keep_their_underscores_unescaped():
    # GIVEN snake_case words, where an underscore between letters can never open emphasis
    # THEN they are written as they are, so the raw Markdown stays readable
    assert md_text("at worker_loop in try_get_data (torch/utils/data/_utils/worker.py:349)") == \
        "at worker_loop in try_get_data (torch/utils/data/\\_utils/worker.py:349)"


def test_a_finding_names_its_frames_and_its_one_rank_as_written():
    # GIVEN a finding on rank 1 whose title and evidence name dunder frames
    finding = Finding(rule="collective-straggler", severity=Severity.CRITICAL,
                      title="Rank 1 is in dataloader-wait (DataLoader.__next__)",
                      evidence=("rank 1 (pid 7): dataloader-wait in DataLoader.__next__ for 4 s",), fix="see `x`",
                      ranks=(1,))
    # WHEN it is drawn in Markdown and rendered
    html = RENDER("\n".join(finding_markdown(finding)))
    # THEN the frame names show as written, not in bold, and the rank reads "rank 1"
    assert "DataLoader.__next__" in visible(html) and "<strong>next</strong>" not in html, html
    assert "(rank 1)" in visible(html) and "(ranks 1)" not in visible(html), html


def test_a_table_cell_with_a_dunder_stays_in_its_cell_as_written():
    html = RENDER("| a | b |\n|---|---|\n| " + md_cell("waits in Queue.__next__ | x") + " | end |\n")
    assert html.count("<td>") == 2 and "Queue.__next__ | x" in visible(html) and "<strong>" not in html, html
