"""A Ctrl-C or SIGTERM while hangdoc prints its report and saves its bundle waits for both, then
leaves with 130 / 143: the report and the bundle are never lost to a signal."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from hangdoc.bundle.files import load_bundle
from hangdoc.cli import watch as watch_cli
from hangdoc.render.formats import OutputFormat
from hangdoc.live.watcher import Outcome
from hangdoc.model import StopReason
from hangdoc.report import judge

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_the_save_waits_for_it_and_then_leaves_with_its_code(tmp_path, monkeypatch, capsys, sig, code):
    # GIVEN a watch that ends on a hang, and a signal that arrives while its bundle is being saved
    bundle = load_bundle(GOLDEN / "worker-deadlock" / "bundle.json")
    outcome = Outcome(judge(bundle), bundle, StopReason.HANG)
    real_save = watch_cli.save_or_say

    def save_while_signalled(*args, **kwargs):
        os.kill(os.getpid(), sig)
        return real_save(*args, **kwargs)

    monkeypatch.setattr(watch_cli, "save_or_say", save_while_signalled)
    out = tmp_path / "b.hangdoc"
    # WHEN the watch finishes
    got = watch_cli.finish(outcome, out, OutputFormat.text)
    # THEN the report was printed, the bundle saved, and the exit code is the signal's
    assert got == code
    said = capsys.readouterr()
    assert "HANG" in said.out
    assert load_bundle(out).samples
    assert "stopped by a signal once the report was out and the bundle saved" in said.err
