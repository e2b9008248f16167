"""A live watch's analysis, kept from round to round, says what the whole history says."""
from __future__ import annotations

import pytest

import dataclasses

from hangdoc.report import judge
from hangdoc.analyze.timeline import LiveTimelines, timelines
from factories import node_bundle
from hangdoc.base.serde import to_dict

T0 = 1_700_000_000.0


def rounds(samples: int, window: int, hang_after: float | None = None):
    """GIVEN a node sampled `samples` times, seen as a watch sees it: the last `window` samples each round."""
    full = node_bundle(0, 1, 3, T0, samples=samples, workers=2)
    full = dataclasses.replace(full, options=dataclasses.replace(full.options, hang_after_s=hang_after))
    for n in range(1, samples + 1):
        yield dataclasses.replace(full, samples=full.samples[max(0, n - window):n])


@pytest.mark.slow
def test_live_timelines_equal_the_whole_history_every_round_also_after_old_samples_are_dropped():
    live = LiveTimelines()
    for bundle in rounds(samples=40, window=25):
        # WHEN the live timelines take one more sample
        kept = live.of(bundle)
        # THEN they are what the bundle's whole history gives, point for point
        assert kept == timelines(bundle)
        for line in kept.values():
            again = timelines(bundle)[line.pid]
            assert line.state_since() == again.state_since()
            assert line.unmoved_since() == again.unmoved_since()


def test_the_report_of_a_live_watch_equals_the_report_of_its_bundle_every_round():
    live = LiveTimelines()
    verdicts = set()
    for bundle in rounds(samples=30, window=12, hang_after=10.0):
        report = judge(bundle, live=live).report
        assert to_dict(report) == to_dict(judge(bundle).report)
        verdicts.add(report.verdict)
    assert "hang" in verdicts


def test_a_light_proc_read_leaves_out_the_kernel_wait_and_the_open_files(tmp_path):
    import os

    from hangdoc.collect.procfs import ProcFS

    # GIVEN this process, holding a regular file open
    with open(tmp_path / "held.bin", "wb") as held:
        held.write(b"x" * 10)
        held.flush()
        fs = ProcFS()
        # WHEN read fully and lightly
        full, light = fs.proc_stat(os.getpid()), fs.proc_stat(os.getpid(), full=False)
    # THEN the light read keeps what progress needs (CPU, I/O, the main thread) and says what it left out
    assert full.full and any(f.path.endswith("held.bin") for f in full.open_files)
    assert not light.full and light.open_files == () and light.wchan is None and light.syscall is None
    assert light.io is not None and light.main_thread is not None and light.cpu_s >= 0
