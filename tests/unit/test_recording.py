"""The recording a watch writes (`--record DIR`) and its replay: the format, its bounds, bad input."""
from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from hangdoc.base.errors import BadBundle, BadOutput
from hangdoc.bundle import recording
from hangdoc.bundle.files import load_bundle
from hangdoc.bundle.recording import Recorder, read_recording
from hangdoc.live.replay import replay
from hangdoc.live.step import Policy, Seen, State, watch_step

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def golden(name: str):
    return load_bundle(GOLDEN / name / "bundle.json")


def record_rounds(directory: Path, bundle, policy: dict | None = None) -> Path:
    """A watch's recording of `bundle`'s samples, one round each, a second apart."""
    recorder = Recorder(directory, {"command": "watch"})
    recorder.write("start", {"policy": policy or {"hang_after_s": bundle.options.hang_after_s}})
    for i in range(1, len(bundle.samples) + 1):
        recorder.write("round", {"at_s": float(i)}, dataclasses.replace(bundle, samples=bundle.samples[:i]), taken=i)
    recorder.close()
    return directory / recording.FILE


def test_a_replay_takes_the_rounds_through_the_step_as_the_watch_did(tmp_path):
    # GIVEN a hung job's rounds, recorded
    bundle = golden("uneven-shards")
    record_rounds(tmp_path / "rec", bundle)
    # WHEN replayed, and WHEN the same rounds go through the step by hand
    replayed = replay(tmp_path / "rec")
    state, policy, stopped = State(), Policy(hang_after_s=bundle.options.hang_after_s), None
    for i in range(1, len(bundle.samples) + 1):
        state, judgement, decision = watch_step(
            state, Seen(dataclasses.replace(bundle, samples=bundle.samples[:i]), float(i)), policy)
        if decision.stop is not None:
            stopped = i
            break
    # THEN both stop at one round with one verdict and culprit
    assert (replayed.stop_round, replayed.report.verdict, replayed.report.culprit_ranks) == \
        (stopped, judgement.report.verdict, judgement.report.culprit_ranks) == (stopped, "hang", (1,))


def test_each_round_holds_only_the_samples_taken_since_the_last(tmp_path):
    # GIVEN a recording of every round of a 5-sample watch
    bundle = golden("uneven-shards")
    record_rounds(tmp_path / "rec", bundle)
    # WHEN read back
    _, records = read_recording(tmp_path / "rec")
    rounds = [r for r in records if r.kind == "round"]
    # THEN each round's bundle holds every sample so far, equal to the watch's, each written once
    assert [len(r.bundle.samples) for r in rounds] == [1, 2, 3, 4, 5]
    assert [r.meta["new"] for r in rounds] == [1, 1, 1, 1, 1]
    assert rounds[-1].bundle.samples == bundle.samples and rounds[-1].bundle.job == bundle.job


def test_a_last_sample_the_watch_replaced_is_written_again(tmp_path):
    # GIVEN a watch that replaced its last sample after writing it (its output's step read into it)
    bundle = golden("uneven-shards")
    recorder = Recorder(tmp_path / "rec", {"command": "watch"})
    two = dataclasses.replace(bundle, samples=bundle.samples[:2])
    recorder.write("round", {"at_s": 1.0}, two, taken=2)
    changed = dataclasses.replace(bundle.samples[1], output_step=41)
    recorder.write("final", {"ending": {}}, dataclasses.replace(bundle, samples=(bundle.samples[0], changed)), taken=2)
    recorder.close()
    # WHEN read back THEN the final record holds the replaced sample, not the first one
    _, records = read_recording(tmp_path / "rec")
    final = [r for r in records][-1]
    assert final.meta["replace_last"] and [s.output_step for s in final.bundle.samples] == \
        [bundle.samples[0].output_step, 41]


def test_the_recording_is_a_file_of_its_own_never_written_over(tmp_path):
    # GIVEN a directory that does not exist yet
    target = tmp_path / "rec"
    # WHEN a recorder opens it, twice
    Recorder(target, {"command": "watch"}).close()
    # THEN the directory is made 0700 and the file 0600
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(target / recording.FILE).st_mode) == 0o600
    # AND a second recording there is refused with one line that says what to do
    with pytest.raises(BadOutput, match="holds a recording already.*another directory"):
        Recorder(target, {"command": "watch"})
    # AND a file where the directory should be is refused, not replaced
    (tmp_path / "file").write_text("mine")
    with pytest.raises(BadOutput, match="not a directory"):
        Recorder(tmp_path / "file", {"command": "watch"})
    assert (tmp_path / "file").read_text() == "mine"


def test_a_recording_cut_short_replays_the_rounds_before_the_cut(tmp_path):
    # GIVEN a recording whose last bytes never reached the disk (the watch was killed as it wrote)
    bundle = golden("uneven-shards")
    path = record_rounds(tmp_path / "rec", bundle)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * 0.95)])
    # WHEN replayed THEN the rounds before the cut are replayed, with no verdict said to be the live one's
    replayed = replay(tmp_path / "rec")
    assert 0 < replayed.live_rounds < len(bundle.samples)
    assert "where the live watch stopped too" not in replayed.summary()


def test_a_recording_past_its_size_bound_stops_and_says_so(tmp_path, monkeypatch):
    # GIVEN a size bound smaller than one round
    monkeypatch.setattr(recording, "MAX_RECORDING_BYTES", 500)
    bundle = golden("uneven-shards")
    record_rounds(tmp_path / "rec", bundle)
    # WHEN replayed THEN the rounds up to the bound replay, and the summary says the recording was cut
    replayed = replay(tmp_path / "rec")
    assert replayed.live_rounds == 1 and "cut at its size bound" in replayed.summary()


@pytest.mark.parametrize("content, said", [
    (b"", "not a readable recording|holds no recording|ends in the middle"),
    (b"not zstd at all", "not a readable recording"),
])
def test_what_is_not_a_recording_is_one_line(tmp_path, content, said):
    # GIVEN a file that is not a recording WHEN replayed THEN BadBundle with one line (exit 2)
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / recording.FILE).write_bytes(content)
    with pytest.raises(BadBundle, match=said) as raised:
        replay(tmp_path / "rec")
    assert "\n" not in str(raised.value)


def test_a_zstd_file_that_is_not_a_recording_is_one_line(tmp_path):
    # GIVEN a saved bundle named as a recording
    import zstandard

    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / recording.FILE).write_bytes(zstandard.ZstdCompressor().compress(b'{"schema": 2}\n'))
    # WHEN replayed THEN one line says it is not a recording
    with pytest.raises(BadBundle, match="not a hangdoc recording"):
        replay(tmp_path / "rec")


def test_a_missing_recording_says_how_to_make_one(tmp_path):
    with pytest.raises(BadBundle, match="--record DIR"):
        replay(tmp_path)
