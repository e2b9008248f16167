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
    assert line.startswith("hangdoc: ") and " sample 8 (quiet 4 s of 4 s (given)): " in line
    assert line.endswith("r0 collective-wait 4s still | r1 dataloader-wait 4s working")


def test_a_long_header_drops_the_clock_before_the_pace(monkeypatch):
    # GIVEN a watch whose pace and Flight Recorder note fill the line at 80 columns
    monkeypatch.setenv("NO_COLOR", "1")
    bundle = load_bundle(GOLDEN / "fr-straggler" / "bundle.json")
    report = judge(bundle).report
    # WHEN the live view draws it at 80 and at 60 columns
    wide, narrow = drawn(bundle, report, 80)[0], drawn(bundle, report, 60)[0]
    # THEN the header fits, and the pace ("quiet N s of M s") is never what is cut
    for head, width in ((wide, 80), (narrow, 60)):
        assert len(head) <= width and "quiet " in head and " of " in head, head


def test_the_status_line_says_flight_recorder_in_words_not_fr_default():
    # GIVEN a job whose ranks leave TORCH_FR_BUFFER_SIZE unset
    from hangdoc.model import FlightSummary

    bundle = load_bundle(GOLDEN / "bz2-shards" / "bundle.json")
    report = replace(judge(bundle).report, flight=FlightSummary(states=("default",), buffer_sizes=(), pipes=0, ranks=2))
    # WHEN the status line is written THEN it names the Flight Recorder and says its setting is torch's default
    line = status_line(report)
    assert " · flight recorder unset (torch's default): " in line and "FR default" not in line
