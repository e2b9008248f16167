"""The evidence helpers rules share: read rates from fd offsets, decoder-over-tar frames, logs."""
from __future__ import annotations

from hangdoc.model import (BUNDLE_SCHEMA, Bundle, Frame, GpuState, Host, IoCounters, Job, LogTail, OpenFile,
                           ProcessInfo, ProcSample, ProcStat, Role, Snapshot)
from hangdoc.model.logline import line_rank as log_rank
from hangdoc.rules.decoding import compression_of_frames, compression_of_path, member_decode
from hangdoc.rules.logs import strip_rank, traceback_frames
from hangdoc.rules.samples import file_read_line, file_reads
from hangdoc.base.cmdline import data_list
from tests.factories import frame


def stdlib(name: str, filename: str, line: int = 1) -> Frame:
    return frame(name, f"/usr/lib/python3.11/{filename}", line)


def bundle_with_offsets(offsets: list[int], path: str = "/data/shard_017.tar.bz2") -> Bundle:
    io = IoCounters(0, 0, 0, 0, 0, 0)
    snaps = tuple(
        Snapshot(time=100.0 + 2 * i, took_s=0.01, gpu=GpuState("unavailable", "no GPU"), processes=(
            ProcSample(7, True, ProcStat("R", None, "0", 1.0 + i, 0.0, 1, 1, io,
                                         (OpenFile(5, path, pos, 50_000_000, "r"),
                                          OpenFile(1, "/tmp/job.log", 900, 900, "w")))),))
        for i, pos in enumerate(offsets))
    job = Job(None, None, None, 2, None, (ProcessInfo(7, 6, Role.WORKER, ("python",), None, 0.0),))
    return Bundle(BUNDLE_SCHEMA, "0", 0.0, Host("h", "x86_64", "k", 2, None, None), job, snaps)


def test_read_rate_comes_from_offset_deltas_between_samples():
    # GIVEN a worker whose offset in a .tar.bz2 moves 18 MB in 4 s, and a log file it writes
    bundle = bundle_with_offsets([2_000_000, 11_000_000, 20_000_000])
    # WHEN its reads are measured
    reads = file_reads(bundle, 7)
    # THEN only the shard counts, at 4.5 MB/s of compressed input
    assert [r.path for r in reads] == ["/data/shard_017.tar.bz2"]
    assert reads[0].bytes_per_s == 4_500_000 and reads[0].backward_seeks == 0
    assert file_read_line(reads[0]) == ("/data/shard_017.tar.bz2 (50.0 MB): offset 2.0 MB -> 20.0 MB in 4.0 s "
                                        "= 4.5 MB/s, 40% of the file")


def test_a_backward_seek_is_counted_and_the_reread_bytes_too():
    # GIVEN an offset that goes back to the start of the file (a seek in bz2 restarts it)
    reads = file_reads(bundle_with_offsets([8_000_000, 1_000_000, 3_000_000]), 7)
    # THEN the seek is counted and the bytes read since the restart are in the rate
    assert reads[0].backward_seeks == 1 and reads[0].read_bytes == 3_000_000


def test_compression_is_read_from_names_and_frames():
    assert compression_of_path("/d/a.tar.bz2") == "bz2" and compression_of_path("/d/a.tgz") == "gzip"
    assert compression_of_path("/d/a.tar") is None
    assert compression_of_frames([stdlib("DecompressReader.read", "_compression.py"),
                                  stdlib("BZ2File.read", "bz2.py")]) == "bz2"
    assert compression_of_frames([stdlib("DecompressReader.read", "_compression.py")]) == ""
    assert compression_of_frames([stdlib("TarFile.next", "tarfile.py")]) is None


def test_a_decoder_reading_a_tar_member_is_found_and_bytes_first_is_not():
    # GIVEN wave reading straight from a member, and a dataset that reads the bytes, then decodes
    straight = [stdlib("DecompressReader.read", "_compression.py"), stdlib("_FileInFile.readinto", "tarfile.py"),
                stdlib("_Chunk.read", "wave.py"), stdlib("Wave_read.readframes", "wave.py")]
    bytes_first = [stdlib("DecompressReader.read", "_compression.py"), stdlib("_FileInFile.readinto", "tarfile.py"),
                   stdlib("read_shuffled", "train.py")]
    # THEN only the first is a tar-member decode
    hit = member_decode(straight)
    assert hit is not None and hit[0].name == "_Chunk.read" and hit[1].name == "_FileInFile.readinto"
    assert member_decode(bytes_first) is None


def test_torchrun_prefixes_and_traceback_frames():
    lines = ("[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "/job/data.py", line 59, in resample',
             '[rank1]:     if sample["sample_rate"] != target:',
             "[rank1]:        ~~~~~~^^^^^^^^^^^^^^^",
             "[rank1]: KeyError: 'sample_rate'")
    assert log_rank(lines[4]) == 1 and strip_rank(lines[4]) == "KeyError: 'sample_rate'"
    assert log_rank("KeyError: x") is None
    assert traceback_frames(lines, 4) == ['resample (job/data.py:59): if sample["sample_rate"] != target:']
    assert LogTail("x", lines).lines == lines


def test_a_data_list_is_found_on_the_command_line():
    assert data_list(("python", "train.py", "--data-list", "/d/train.list")) == "/d/train.list"
    assert data_list(("python", "train.py", "--train_data=data/shards.txt")) == "data/shards.txt"
    assert data_list(("python", "train.py", "data/train/data.list")) == "data/train/data.list"
    assert data_list(("python", "train.py", "--lr", "0.1")) is None


def test_uneven_shards_counts_what_each_rank_was_given_from_the_copied_list():
    # GIVEN the real uneven-shards bundle and a copy of a 5-shard list its ranks were given
    import dataclasses
    from pathlib import Path

    from hangdoc.report import judge
    from hangdoc.bundle.files import load_bundle
    from hangdoc.base.cmdline import data_list
    from hangdoc.model import DataListCopy

    bundle = load_bundle(Path(__file__).resolve().parents[1] / "golden" / "uneven-shards" / "bundle.json")
    rank = bundle.job.ranks[1]
    named = data_list(rank.cmdline) or "/data/train.list"
    if data_list(rank.cmdline) is None:
        rank = dataclasses.replace(rank, cmdline=rank.cmdline + ("--data-list", named))
        bundle = dataclasses.replace(bundle, job=dataclasses.replace(
            bundle.job, processes=tuple(rank if p.pid == rank.pid else p for p in bundle.job.processes)))
    shards = tuple(f"/data/s{i}.tar" for i in range(5))
    bundle = dataclasses.replace(bundle, data_lists=(DataListCopy(
        path="/data/" + named.rsplit("/", 1)[-1], kind="shard", entries=shards, sizes=(1 << 20,) * 5),))
    # WHEN diagnosed
    finding = next(f for f in judge(bundle).report.findings if f.rule == "uneven-shards")
    # THEN the evidence shows the split: 5 shards over 4 readers, rank 1 with 2 of them
    text = "\n".join(finding.evidence)
    assert "5 % 4 = 1" in text
    assert "rank 0: 3 entries, 3.1 MB (w0 2, w1 1)" in text and "rank 1: 2 entries, 2.1 MB (w0 1, w1 1)" in text
