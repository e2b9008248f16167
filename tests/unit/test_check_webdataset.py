"""`hangdoc check data` on webdataset image shards: members grouped by key as webdataset does."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from factories import write_list
from hangdoc.check.pairing import pair_members
from hangdoc.cli import main


@pytest.fixture(autouse=True)
def wide_plain_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")


def write_wds_shard(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def image_samples(prefix: str, n: int, drop: tuple[str, ...] = ()) -> list[tuple[str, bytes]]:
    """webdataset's usual image layout: key.jpg + key.cls (+ key.json), adjacent."""
    members = []
    for i in range(n):
        key = f"{prefix}{i:06d}"
        for ext, data in (("jpg", b"\xff\xd8\xff" + bytes(600)), ("cls", str(i % 10).encode()),
                          ("json", b'{"w": 64, "h": 64}')):
            if f"{key}.{ext}" not in drop:
                members.append((f"{key}.{ext}", data))
    return members


def check(capsys, data: Path) -> tuple[int, dict]:
    code = main(["check", "data", str(data), "-w", "2", "-k", "1", "--sample", "0", "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_webdataset_image_shard_has_no_stray_members(tmp_path, capsys):
    # GIVEN two webdataset image shards (key.jpg + key.cls + key.json, 8 samples each)
    for name in ("train-000.tar", "train-001.tar"):
        write_wds_shard(tmp_path / name, image_samples(name[:9], 8))
    data = write_list(tmp_path / "data.list", ["train-000.tar", "train-001.tar"])
    # WHEN checked
    code, report = check(capsys, data)
    # THEN nothing is stray or unpaired: each shard holds 8 whole samples of 24 members
    assert [f["rule"] for f in report["findings"]] == []
    shard = report["facts"]["shards"][0]
    assert (shard["members"], shard["utterances"], shard["strays"], shard["layout"]) == (24, 8, [], "webdataset")
    assert code == 0


def test_a_key_that_lacks_the_label_the_other_keys_have_is_reported(tmp_path, capsys):
    # GIVEN a shard whose third sample has no .cls
    write_wds_shard(tmp_path / "a.tar", image_samples("a", 8))
    write_wds_shard(tmp_path / "b.tar", image_samples("b", 8, drop=("b000002.cls",)))
    data = write_list(tmp_path / "data.list", ["a.tar", "b.tar"])
    # WHEN checked
    code, report = check(capsys, data)
    # THEN unpaired-member names that key and the member it lacks, and no other member
    [unpaired] = [f for f in report["findings"] if f["rule"] == "unpaired-member"]
    assert unpaired["severity"] == "critical"
    assert unpaired["title"].startswith("1 sample in 1 shard lacks a member the other samples have")
    assert unpaired["evidence"] == [
        "#1 b.tar: b000002 has .jpg + .json but no .cls, which most samples of its shard have"]
    assert code == 1


def test_webdataset_keys_end_at_the_first_dot_and_an_image_in_any_format_is_the_image():
    # GIVEN keys with a directory, a two-dot field (seg.png) and one sample's image as .png
    names = ["d/0.jpg", "d/0.seg.png", "d/0.cls", "d/1.png", "d/1.seg.png", "d/1.cls", "d/2.jpg", "d/2.seg.png"]
    pairing = pair_members(names)
    # THEN the .png stands in for the .jpg, and only d/2 (no .cls) is incomplete
    assert pairing.layout == "webdataset" and pairing.utterances == 2
    assert pairing.unpaired == ("d/2 has .jpg + .seg.png but no .cls, which most samples of its shard have",)


def test_speech_shards_still_pair_audio_with_transcripts():
    # GIVEN WeNet's layout with a stray JSON member THEN the old reading holds
    pairing = pair_members(["a.wav", "a.txt", "b.flac", "b.txt", "e.json"])
    assert (pairing.layout, pairing.utterances, pairing.strays) == ("speech", 2, ("e.json",))
