"""The live view a user watches on a terminal while hangdoc samples: pinned line for line."""
from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

from hangdoc.report import judge
from factories import node_bundle
from hangdoc.bundle.files import load_bundle
from hangdoc.render.live import live_table, status_line
from hangdoc.render.text import make_console

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def drawn(bundle, report, width: int) -> list[str]:
    out = io.StringIO()
    make_console(out, width, terminal=True).print(live_table(report, width, now="12:00:00"))
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_the_live_table_of_a_bz2_hang_at_80_columns(monkeypatch):
    # GIVEN the bz2-shards golden bundle, on an 80-column terminal without colour
    monkeypatch.setenv("NO_COLOR", "1")
    bundle = load_bundle(GOLDEN / "bz2-shards" / "bundle.json")
    # WHEN the live view draws it
    lines = drawn(bundle, judge(bundle).report, 80)
    # THEN rank, state, wait and progress always show, and the top frame is cut to fit: its
    # directories first, then the middle of its name; file:line always whole
    assert lines == [
        "hangdoc watching 2 ranks · sample 8 · 12:00:00 · quiet 4 s of 4 s (given)",
        "RANK  STATE            FOR  PROGRESS  TOP FRAME",
        "0     collective-wait  4s   still     _engine_run_backward (…/graph.py:979)",
        " w0   idle                            Queue.get (multiprocessing/queues.py:113)",
        " w1   idle                            Queue.get (multiprocessing/queues.py:113)",
        "1     dataloader-wait  4s   working   _MultiPro…_get_data (…/dataloader.py:1291)",
        " w0   decompressing                   Decompres…eader.read (_compression.py:103)",
        " w1   decompressing                   Decompres…eader.read (_compression.py:103)",
    ]
    assert all(len(line) <= 80 for line in lines)


def test_gpu_sparklines_show_when_there_are_gpus_and_power_when_there_is_room(monkeypatch):
    # GIVEN one node of 2 ranks on GPUs (NVML sampled), one rank waiting on its data
    monkeypatch.setenv("NO_COLOR", "1")
    bundle = node_bundle(0, 1, 1, 1_700_000_000.0, ranks_per_node=2, workers=1)
    report = judge(bundle).report
    # WHEN drawn at 80 and at 120 columns
    narrow, wide = drawn(bundle, report, 80), drawn(bundle, report, 120)
    # THEN the GPU utilisation column shows at 80, the power column only at 120
    assert narrow[1].split() == ["RANK", "STATE", "FOR", "PROGRESS", "GPU", "TOP", "FRAME"]
    assert wide[1].split() == ["RANK", "STATE", "FOR", "PROGRESS", "GPU", "POWER", "TOP", "FRAME"]
    assert "▁▁▁" in narrow[2]


def test_off_a_terminal_the_view_is_one_status_line_per_round():
    bundle = load_bundle(GOLDEN / "bz2-shards" / "bundle.json")
    line = status_line(judge(bundle).report)
    assert line == "hangdoc #8 (quiet 4 s of 4 s (given)): r0 collective-wait 4s still | r1 dataloader-wait 4s working"


def test_a_long_header_drops_the_clock_before_the_pace(monkeypatch):
    # GIVEN a watch whose pace and Flight Recorder note fill the line at 80 columns
    monkeypatch.setenv("NO_COLOR", "1")
    bundle = load_bundle(GOLDEN / "fr-straggler" / "bundle.json")
    report = judge(bundle).report
    # WHEN the live view draws it at 80 and at 60 columns
    wide, narrow = drawn(bundle, report, 80)[0], drawn(bundle, report, 60)[0]
    # THEN the header fits, and the pace ("quiet N s of M s", "quiet N s, over M s") is never what is cut
    for head, width in ((wide, 80), (narrow, 60)):
        assert len(head) <= width and "quiet 6 s, over 4 s (given)" in head, head


def test_the_flight_recorder_is_said_once_in_words_not_on_every_status_line():
    # GIVEN a job whose ranks leave TORCH_FR_BUFFER_SIZE unset, watched off a terminal
    from hangdoc.model import FlightSummary
    from hangdoc.render.live import LiveView

    bundle = load_bundle(GOLDEN / "bz2-shards" / "bundle.json")
    report = replace(judge(bundle).report, flight=FlightSummary(states=("default",), buffer_sizes=(), pipes=0, ranks=2))
    out = io.StringIO()
    view = LiveView(out, live=False, every=1)
    # WHEN three rounds are shown
    for _ in range(3):
        view.update(report)
    lines = out.getvalue().splitlines()
    # THEN the Flight Recorder's setting is one line of its own, in words, and no status line repeats it
    assert lines[0] == "hangdoc: flight recorder unset (torch's default)"
    assert len(lines) == 4 and not any("flight recorder" in line for line in lines[1:])


def test_the_status_line_fits_100_columns_with_every_rank_of_a_slow_job_shown():
    # GIVEN golden jobs whose status lines ran to about 200 columns (a slow job's shares among them)
    for case in ("compute-straggler", "workers-unpinned", "slow-data", "fr-straggler", "restart-recovered"):
        report = judge(load_bundle(GOLDEN / case / "bundle.json")).report
        # WHEN the status line is written
        line = status_line(report)
        # THEN it fits 100 columns and still names each rank (none counted away as "+N more")
        assert len(line) <= 100, line
        assert " more" not in line and "r0" in line, line


def test_many_ranks_fold_into_entries_alike_and_the_rest_is_counted():
    # GIVEN 16 ranks, 15 of them alike
    bundle = load_bundle(GOLDEN / "bz2-shards" / "bundle.json")
    report = judge(bundle).report
    first, second = report.ranks
    ranks = tuple(replace(first, rank=r) for r in range(15)) + (replace(second, rank=15),)
    # WHEN the status line is written THEN the alike ranks are one entry, in 100 columns
    line = status_line(replace(report, ranks=ranks))
    assert line.endswith("r0-14 collective-wait still | r15 dataloader-wait working"), line
    assert len(line) <= 100
