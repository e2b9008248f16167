"""`hangdoc check data` on real shards and lists written by the tests."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangdoc.registry import record
from factories import write_list, write_raw_list, write_shard
from hangdoc.check.throughput import can_read
from hangdoc.cli import main


@pytest.fixture(autouse=True)
def wide_plain_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["check", "data", *args])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *args: str) -> tuple[int, dict]:
    code, out, _ = run(capsys, *args, "--format", "json")
    return code, json.loads(out)


def shards(folder: Path, n: int, utterances: int = 10, compression: dict[int, str] | None = None,
           prefix: str = "s") -> list[str]:
    """Write n shards of `utterances` pairs each; returns their names (relative to folder)."""
    names = []
    for i in range(n):
        kind = (compression or {}).get(i, "none")
        name = f"{prefix}{i}.tar" + {"none": "", "bz2": ".bz2", "gzip": ".gz", "xz": ".xz"}[kind]
        write_shard(folder / name, [f"{prefix}{i}_{u}" for u in range(utterances)], compression=kind,
                    wav_bytes=20000 if kind != "none" else 4000, seed=i)
        names.append(name)
    return names


def rule(report: dict, slug: str) -> dict:
    found = [f for f in report["findings"] if f["rule"] == slug]
    assert found, f"no {slug} in {[f['rule'] for f in report['findings']]}"
    return found[0]


# --- clean --------------------------------------------------------------------------------------


def test_even_shards_over_2x2_are_clean_and_exit_0(tmp_path, capsys):
    # GIVEN 8 equal plain shards for 2 ranks x 2 workers
    data = write_list(tmp_path / "data.list", shards(tmp_path, 8))
    # WHEN checked
    code, out, err = run(capsys, str(data), "--world-size", "2", "--num-workers", "2")
    # THEN nothing is found and the partition is printed
    assert code == 0, out + err
    assert "no findings" in out
    assert "hangdoc check data: 8 shards in 1 list, 2 ranks x 2 workers" in out


def test_relative_shard_paths_resolve_against_the_lists_directory(tmp_path, capsys, monkeypatch):
    # GIVEN a list of relative names, checked from another directory
    data = write_list(tmp_path / "data.list", shards(tmp_path, 4))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # WHEN checked THEN every shard is found
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2")
    assert code == 0
    assert [s["status"] for s in report["facts"]["shards"]] == ["ok"] * 4


# --- partition ------------------------------------------------------------------------------------


def test_seven_shards_over_2x2_flag_uneven_shards_with_the_spread(tmp_path, capsys):
    # GIVEN 7 shards of 10 utterances for 2 ranks x 2 workers
    data = write_list(tmp_path / "data.list", shards(tmp_path, 7))
    # WHEN checked
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2")
    # THEN rank 1 gets 30 utterances against rank 0's 40: a warning naming rank 1, exit 1
    assert code == 1
    uneven = rule(report, "uneven-shards")
    assert uneven["severity"] == "warning"
    assert uneven["ranks"] == [1]
    assert "as few as 30 utterances, rank 0 gets 40 (spread 10, 25 %)" in uneven["title"]
    assert "7 shards over 2 ranks x 2 workers: 7 is not a multiple of 4" in uneven["evidence"]
    assert uneven["fix"] == record("uneven-shards").fix
    # AND the per-worker shards are the classic split shards[rank::2][worker::2]
    ranks = report["facts"]["classic"]["ranks"]
    assert [[w["indices"] for w in r["workers"]] for r in ranks] == [[[0, 4], [2, 6]], [[1, 5], [3]]]
    assert [r["utterances"] for r in ranks] == [40, 30]
    assert report["facts"]["orders_agree"] is True


def test_fail_on_critical_lets_a_warning_pass_but_still_reports_it(tmp_path, capsys):
    data = write_list(tmp_path / "data.list", shards(tmp_path, 7))
    code, out, _ = run(capsys, str(data), "-w", "2", "-k", "2", "--fail-on", "critical")
    assert code == 0
    assert "WARNING  uneven-shards  rank 1" in out


def test_batch_size_compares_ranks_in_batches(tmp_path, capsys):
    # GIVEN 7 shards of 10 utterances and batches of 4 (each worker batches its own stream)
    data = write_list(tmp_path / "data.list", shards(tmp_path, 7))
    # WHEN checked THEN rank 0 has 5 + 5 batches, rank 1 has 5 + 3
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2", "--batch-size", "4")
    assert code == 1
    assert [r["batches"] for r in report["facts"]["classic"]["ranks"]] == [10, 8]
    assert "as few as 8 batches, rank 0 gets 10 (spread 2, 20 %)" in rule(report, "uneven-shards")["title"]


def test_empty_workers_are_a_note_and_a_rank_without_shards_is_critical(tmp_path, capsys):
    # GIVEN 1 shard for 2 ranks x 2 workers
    data = write_list(tmp_path / "data.list", shards(tmp_path, 1))
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2")
    # THEN 3 of 4 workers are empty (info) and rank 1 gets nothing at all (critical)
    empty = rule(report, "empty-worker")
    assert empty["severity"] == "info"
    assert empty["title"] == "3 of 4 DataLoader workers get no shard"
    assert rule(report, "uneven-shards")["severity"] == "critical"
    assert code == 1


# --- shards ---------------------------------------------------------------------------------------


def test_missing_shard_is_a_critical_finding_not_a_crash(tmp_path, capsys):
    # GIVEN a list naming two files that do not exist
    names = shards(tmp_path, 6) + ["gone_a.tar", "gone_b.tar"]
    data = write_list(tmp_path / "data.list", names)
    # WHEN checked
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2")
    # THEN missing-shard names both, with the rank and worker that would read them
    missing = rule(report, "missing-shard")
    assert code == 1
    assert missing["severity"] == "critical"
    assert missing["ranks"] == [0, 1]
    assert missing["title"].startswith("2 shards named in the list do not exist")
    assert f"#6 -> rank 0, worker 1: {tmp_path / 'gone_a.tar'}" in missing["evidence"]
    assert f"#7 -> rank 1, worker 1: {tmp_path / 'gone_b.tar'}" in missing["evidence"]


def test_broken_pair_is_critical_and_a_stray_member_is_reported(tmp_path, capsys):
    # GIVEN a shard whose u1 has no .wav and another with a stray README
    names = shards(tmp_path, 2)
    write_shard(tmp_path / "broken.tar", ["b0", "b1", "b2"], drop=["b1.wav"])
    write_shard(tmp_path / "stray.tar", ["c0"], extra=["README"])
    data = write_list(tmp_path / "data.list", names + ["broken.tar", "stray.tar"])
    # WHEN checked
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2")
    # THEN unpaired-member is critical and cites the member and the stray
    unpaired = rule(report, "unpaired-member")
    assert unpaired["severity"] == "critical"
    assert "#2 broken.tar: b1.txt has no adjacent audio member" in unpaired["evidence"]
    assert "#3 stray.tar: stray member README" in unpaired["evidence"]
    broken = report["facts"]["shards"][2]
    assert (broken["members"], broken["utterances"]) == (5, 2)
    assert code == 1


def test_empty_shard_is_a_warning(tmp_path, capsys):
    # GIVEN a valid tar without members among 3 full shards
    names = shards(tmp_path, 3)
    write_shard(tmp_path / "empty.tar", [])
    data = write_list(tmp_path / "data.list", names + ["empty.tar"])
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2")
    empty = rule(report, "empty-shard")
    assert empty["severity"] == "warning"
    assert empty["ranks"] == [1]
    assert report["facts"]["shards"][3]["members"] == 0
    assert code == 1


def test_a_file_that_is_not_a_tar_and_a_truncated_tar_are_unreadable(tmp_path, capsys):
    names = shards(tmp_path, 2)
    (tmp_path / "junk.tar").write_bytes(b"this is not a tar file at all" * 40)
    whole = (tmp_path / names[0]).read_bytes()
    (tmp_path / "cut.tar").write_bytes(whole[:3000])
    data = write_list(tmp_path / "data.list", names + ["junk.tar", "cut.tar"])
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2")
    unreadable = rule(report, "unreadable-shard")
    assert unreadable["severity"] == "critical"
    statuses = {s["path"].rsplit("/", 1)[-1]: (s["status"], s["error"]) for s in report["facts"]["shards"]}
    assert statuses["junk.tar"][0] == "unreadable"
    assert statuses["cut.tar"][0] == "unreadable" and statuses["cut.tar"][1].startswith("truncated")
    assert code == 1


# --- compression and mixed datasets -------------------------------------------------------------------


def test_a_rank_that_draws_every_bz2_shard_gets_slow_decompression_with_numbers(tmp_path, capsys):
    # GIVEN two datasets: a.list (4 plain shards) and b.list (bz2, plain, bz2): concatenated,
    # the bz2 shards sit at indices 4 and 6, both rank 0's under W=2 (field notes, hang 1)
    a = write_list(tmp_path / "a.list", shards(tmp_path, 4, prefix="a"))
    b = write_list(tmp_path / "b.list", shards(tmp_path, 3, compression={0: "bz2", 2: "bz2"}, prefix="b"))
    # WHEN both lists are checked, every shard sampled
    code, report = run_json(capsys, str(a), str(b), "-w", "2", "-k", "2", "--sample", "8")
    # THEN slow-decompression blames rank 0 and carries the measured slowdown
    slow = rule(report, "slow-decompression")
    assert code == 1
    assert slow["severity"] == "warning"
    assert slow["ranks"] == [0]
    assert "rank 0 reads 2 of 2 bz2 shards (100 %); bz2 reads" in slow["title"]
    assert "x slower than plain tar" in slow["title"]
    bz2 = [t for t in report["facts"]["throughput"] if t["compression"] == "bz2"]
    # (a measured ratio on a shared machine: bz2 is many times slower when quiet, only "slower" is pinned)
    assert len(bz2) == 2 and all(t["slowdown"] > 1 and t["utterances"] == 10 for t in bz2)
    assert any(e.startswith("bz2: ") and "MB/s" in e and "utterances/s" in e for e in slow["evidence"])
    # AND the per-rank share of each dataset is reported
    assert "b.list utterances: rank 0 67 %, rank 1 33 %" in slow["evidence"]
    ranks = report["facts"]["classic"]["ranks"]
    assert [r["compression_items"].get("bz2", 0) for r in ranks] == [2, 0]


def test_bz2_spread_evenly_is_only_a_note(tmp_path, capsys):
    # GIVEN 8 shards, bz2 at indices 4 and 5: one per rank
    data = write_list(tmp_path / "data.list", shards(tmp_path, 8, compression={4: "bz2", 5: "bz2"}))
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2", "--sample", "8")
    slow = rule(report, "slow-decompression")
    assert slow["severity"] == "info"
    assert code == 0


def test_compressed_shards_are_only_counted_when_sampled_and_the_output_says_so(tmp_path, capsys):
    # GIVEN 4 gzip shards and 4 plain ones, with no sampling
    data = write_list(tmp_path / "data.list",
                      shards(tmp_path, 8, compression={i: "gzip" for i in range(4)}))
    code, out, _ = run(capsys, str(data), "-w", "2", "-k", "2", "--sample", "0")
    # THEN gzip shards show no member count, and the notes say their utterances are estimated
    assert "not decompressed: 4 of 4 compressed shards; their utterances are estimated" in out
    assert "'-' members: compressed and not sampled, so not decompressed" in out
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2", "--sample", "0")
    assert [s["compression"] for s in report["facts"]["shards"]] == ["gzip"] * 4 + ["none"] * 4
    assert [s["members"] for s in report["facts"]["shards"][:4]] == [None] * 4


@pytest.mark.skipif(can_read("zstd"), reason="this Python can read zstd")
def test_zstd_shards_are_classified_but_not_sampled_without_a_zstd_reader(tmp_path, capsys):
    names = shards(tmp_path, 3)
    (tmp_path / "z.tar.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(200))
    data = write_list(tmp_path / "data.list", names + ["z.tar.zst"])
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2")
    assert report["facts"]["shards"][3]["compression"] == "zstd"
    assert report["facts"]["shards"][3]["status"] == "ok"
    assert "unreadable-shard" not in {f["rule"] for f in report["findings"]}
    assert any("reading zstd needs Python 3.14" in n for n in report["facts"]["notes"])


# --- raw lists ----------------------------------------------------------------------------------------


def test_raw_json_list_is_split_by_line_and_names_missing_audio(tmp_path, capsys):
    # GIVEN a raw list of 5 utterances, one of whose wav files is missing
    for k in range(4):
        (tmp_path / f"u{k}.wav").write_bytes(b"RIFF" + bytes(100))
    rows = [(f"u{k}", f"u{k}.wav", f"text {k}") for k in range(5)]
    data = write_raw_list(tmp_path / "raw.list", rows)
    # WHEN checked for 2 ranks x 2 workers
    code, report = run_json(capsys, str(data), "-w", "2", "-k", "2")
    # THEN the missing file is critical and rank 0 gets 3 lines to rank 1's 2
    assert report["facts"]["kind"] == "raw"
    missing = rule(report, "missing-audio")
    assert missing["severity"] == "critical"
    assert missing["evidence"] == [f"#4 -> rank 0, worker 0: {tmp_path / 'u4.wav'}"]
    assert [r["utterances"] for r in report["facts"]["classic"]["ranks"]] == [3, 2]
    assert rule(report, "uneven-shards")["ranks"] == [1]
    assert code == 1


def test_a_raw_line_that_is_not_json_is_a_bad_list_entry(tmp_path, capsys):
    (tmp_path / "u0.wav").write_bytes(b"RIFF")
    data = tmp_path / "raw.list"
    data.write_text('{"key": "u0", "wav": "u0.wav", "txt": "a"}\n{"key": "u1", "wav": \n{"key": "u2"}\n')
    code, report = run_json(capsys, str(data), "-w", "1", "-k", "1")
    bad = rule(report, "bad-list-entry")
    assert bad["severity"] == "critical"
    assert bad["title"] == "2 lines of the data list cannot be parsed"
    assert any(e.startswith(f"{data}:3: no wav, txt key") for e in bad["evidence"])
    assert code == 1


# --- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["nope.list", "-w", "2", "-k", "2"], "hangdoc: error: data list not found: nope.list"),
    (["LIST", "-w", "0", "-k", "2"], "hangdoc: error: --world-size must be at least 1, got 0"),
    (["LIST", "-w", "2", "-k", "0"], "hangdoc: error: --num-workers must be at least 1, got 0"),
    (["DIR", "-w", "2", "-k", "2"], "is a directory, not a data list"),
    (["LIST", "RAW", "-w", "2", "-k", "2"], "the lists mix shard and raw lists"),
    (["LIST", "-w", "2", "-k", "2", "--format", "yaml"], "'yaml' is not one of 'text', 'json', 'markdown'"),
    (["LIST", "-w", "2", "-k", "2", "--fail-on", "loud"], "'loud' is not one of 'critical', 'warning', 'info'"),
])
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    write_list(tmp_path / "data.list", shards(tmp_path, 2))
    write_raw_list(tmp_path / "raw.list", [("u", "u.wav", "t")])
    subs = {"LIST": "data.list", "RAW": "raw.list", "DIR": str(tmp_path)}
    code, out, err = run(capsys, *(subs.get(a, a) for a in args))
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err + out


# --- output formats -----------------------------------------------------------------------------------


def test_json_has_the_check_schema_and_findings_shaped_like_model_finding(tmp_path, capsys):
    data = write_list(tmp_path / "data.list", shards(tmp_path, 7))
    _, report = run_json(capsys, str(data), "-w", "2", "-k", "2")
    assert report["schema"] == "hangdoc/check-v1"
    assert report["command"] == "data"
    assert set(report["findings"][0]) == {"rule", "severity", "ranks", "title", "evidence", "fix", "cause"}
    assert {"shards", "classic", "torch", "throughput", "lists"} <= set(report["facts"])


def test_markdown_has_findings_and_tables(tmp_path, capsys):
    data = write_list(tmp_path / "data.list", shards(tmp_path, 7))
    code, out, _ = run(capsys, str(data), "-w", "2", "-k", "2", "--format", "markdown")
    assert code == 1
    assert "### WARNING `uneven-shards` (rank 1)" in out
    assert "| rank | worker | shards | utterances | size |" in out
    assert "| 1 | 1 | 3 | 10 | 61.4 kB |" in out
