"""Every input is read within a budget (hangdoc/base/limits.py, docs/bundle.md "Budgets"): a crafted
bundle or Flight Recorder dump costs one line, never gigabytes, a traceback or a wait forever."""
from __future__ import annotations

import errno
import json
import os
import pickle
import types
from collections import deque
from pathlib import Path

import pytest
import zstandard

from hangdoc.analyze.diagnose import node_digest
from hangdoc.base.errors import BadBundle, BadOutput
from hangdoc.base.limits import MAX_BUNDLE_JSON_BYTES, MAX_DUMP_OBJECTS, MAX_LOG_LINES
from hangdoc.bundle import codec
from hangdoc.bundle.files import check_writable, load_bundle, load_head, save_bundle
from hangdoc.cli import main
from hangdoc.collect.flight_recorder import BadDump, collect_dumps, fr_config, read_dump
from hangdoc.collect.snapshot import Probes
from hangdoc.live.options import WatchOptions
from hangdoc.live.watcher import Watcher
from hangdoc.model import ProcessInfo, Role, Verdict
from tests.factories import node_bundle

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
BUNDLE = GOLDEN / "barrier-mismatch" / "bundle.json"


def fr_entry(frames: int = 100) -> dict:
    return {"process_group": ["0", "default_pg"], "collective_seq_id": 7, "profiling_name": "gloo:all_reduce",
            "state": "scheduled", "input_sizes": [[4]], "input_dtypes": ["Float"],
            "frames": [{"name": f"f{i}", "filename": "train.py", "line": i} for i in range(frames)]}


def fr_dump(entries: list, **extra) -> dict:
    return {"version": "2.10", "entries": entries, "pg_status": {"0": {"last_enqueued_collective": 7}}, **extra}


def run_cli(capsys, *args: str) -> tuple[int, list[str]]:
    rc = main(list(args))
    return rc, capsys.readouterr().err.strip().splitlines()


# --- Flight Recorder dumps --------------------------------------------------------------------------


def test_a_pickle_sharing_one_entry_many_times_is_refused_by_its_object_budget(tmp_path):
    # GIVEN a small pickle whose entries are one dict (100 frames) named 20,000 times through the memo
    path = tmp_path / "trace_0"
    entry = fr_entry()
    path.write_bytes(pickle.dumps(fr_dump([entry] * 20_000), protocol=4))
    assert path.stat().st_size < 100_000
    # WHEN it is read
    with pytest.raises(BadDump) as refused:
        read_dump(path)
    # THEN it is refused with one line naming the budget: every use of the shared entry counts
    assert f"{MAX_DUMP_OBJECTS:,} values" in str(refused.value) and "\n" not in str(refused.value)


def test_a_real_sized_dump_is_read_whole():
    # GIVEN a dump of FR's default size (2000 entries of 30 frames) WHEN read THEN nothing is refused
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace_1"
        path.write_bytes(pickle.dumps(fr_dump([fr_entry(30) for _ in range(2000)])))
        assert len(read_dump(path).entries) == 2000


def test_a_deeply_nested_json_dump_in_the_watch_is_one_error_line(tmp_path):
    # GIVEN a JSON dump under a rank's FR prefix nested 100,000 deep
    prefix = tmp_path / "trace_"
    (tmp_path / "trace_0").write_text('{"entries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    info = ProcessInfo(pid=5, ppid=1, role=Role.RANK, cmdline=(), exe=None, start_time=0.0,
                       env={"TORCH_FR_DUMP_TEMP_FILE": str(prefix)}, rank=0)
    # WHEN the watch collects the job's dumps
    records, errors = collect_dumps([fr_config(info)], trigger=False)
    # THEN no record, one line saying why: no RecursionError
    assert records == () and len(errors) == 1 and "nested" in errors[0]


def test_a_frame_line_of_20000_digits_does_not_break_the_report(tmp_path, capsys):
    # GIVEN a pickled dump whose frame line is an integer of 20,000 digits
    entry = fr_entry(2)
    entry["frames"][0]["line"] = 10**20_000 - 1
    path = tmp_path / "trace_0"
    path.write_bytes(pickle.dumps(fr_dump([entry])))
    # WHEN `hangdoc report` reads it THEN the line is dropped as unreadable, and the report printed
    assert read_dump(path).entries[0].frames[0].line == 0
    rc = main(["report", str(path)])
    assert rc in (0, 3, 5, 7), capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err


def test_a_fifo_named_like_a_dump_is_never_waited_on(tmp_path):
    # GIVEN a FIFO where a rank's dump would be
    os.mkfifo(tmp_path / "trace_0")
    # WHEN it is read as a dump THEN it is refused at once
    with pytest.raises(BadDump, match="FIFO"):
        read_dump(tmp_path / "trace_0")


# --- bundles ---------------------------------------------------------------------------------


def v2_with_digest(tmp_path: Path, edit=None) -> Path:
    bundle = load_bundle(BUNDLE)
    data = json.loads(codec.encode(bundle, node_digest(bundle)))
    if edit:
        edit(data)
    path = tmp_path / "node.json"
    path.write_text(json.dumps(data))
    return path


def test_a_digest_claiming_a_billion_nodes_is_refused_before_any_census(tmp_path):
    # GIVEN a node bundle whose digest claims group_world_size 10^9
    path = v2_with_digest(tmp_path, lambda d: d["digest"].update(group_world_size=10**9))
    # WHEN its head is read (what `report DIR` reads of each node)
    with pytest.raises(BadBundle, match="group_world_size"):
        load_head(path)


def test_a_zstd_bomb_is_stopped_at_the_decompressed_budget(tmp_path):
    # GIVEN 300 MB of zeros streamed into zstd (no size in the frame), a few KB on disk
    writer = zstandard.ZstdCompressor(level=1).compressobj()
    zeros = b"\0" * (1 << 20)
    data = b"".join(writer.compress(zeros) for _ in range(300)) + writer.flush()
    path = tmp_path / "bomb.json.zst"
    path.write_bytes(data)
    # WHEN loaded THEN one line, refused at the budget
    with pytest.raises(BadBundle, match=f"{MAX_BUNDLE_JSON_BYTES:,} bytes"):
        load_bundle(path)


def test_a_frame_claiming_64_gib_is_refused_from_its_header(tmp_path):
    # GIVEN a zstd frame whose header declares 64 GiB of content (single segment, 8-byte size)
    frame = b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + (64 << 30).to_bytes(8, "little") + b"\x09\x00\x00" + b"{"
    path = tmp_path / "b.json.zst"
    path.write_bytes(frame)
    # WHEN loaded THEN refused by what the header says, nothing allocated
    with pytest.raises(BadBundle, match="its header says"):
        load_bundle(path)


def test_millions_of_log_lines_in_a_few_kb_are_refused_before_decoding(tmp_path):
    # GIVEN a bundle whose log tail holds 17 M empty lines, zstd-compressed to a few KB
    data = json.loads(BUNDLE.read_text())
    head, _, tail = json.dumps(dict(data, logs=[{"source": "x.log", "lines": ["MARK"]}])).partition('"MARK"')
    writer = zstandard.ZstdCompressor(level=1).compressobj()
    body = writer.compress(head.encode()) + b"".join(writer.compress(b'"",' * 1_000_000) for _ in range(17))
    path = tmp_path / "lines.json.zst"
    path.write_bytes(body + writer.compress(b'""' + tail.encode()) + writer.flush())
    # WHEN loaded THEN refused by the count of values, before any line is built
    with pytest.raises(BadBundle, match="JSON values"):
        load_bundle(path)


def test_a_log_tail_beyond_the_line_budget_is_refused(tmp_path):
    # GIVEN a bundle with one tail of MAX_LOG_LINES + 1 lines
    data = json.loads(BUNDLE.read_text())
    data["logs"] = [{"source": "x.log", "lines": ["step"] * (MAX_LOG_LINES + 1)}]
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BadBundle, match="lines"):
        load_bundle(path)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_what_is_not_a_regular_file_is_refused_with_one_line(tmp_path, capsys, kind):
    # GIVEN a FIFO named like a bundle, or /dev/zero
    path = tmp_path / "b.json.zst"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    # WHEN `hangdoc report` reads it THEN exit 2 at once, one line
    rc, err = run_cli(capsys, "report", str(path))
    assert rc == 2 and len(err) == 1 and err[0].startswith("hangdoc: error: ") and "not a regular file" in err[0]


def test_a_bundle_repacked_by_the_zstd_command_still_reads(tmp_path):
    # GIVEN a real bundle compressed as `zstd` does from a pipe: no content size in the frame
    plain = tmp_path / "b.json"
    save_bundle(load_bundle(BUNDLE), plain)
    writer = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    packed = tmp_path / "b.json.zst"
    packed.write_bytes(writer.compress(plain.read_bytes()) + writer.flush())
    assert zstandard.get_frame_parameters(packed.read_bytes()).content_size == zstandard.CONTENTSIZE_UNKNOWN
    # WHEN loaded THEN it is the same bundle
    assert load_bundle(packed) == load_bundle(plain)


@pytest.mark.parametrize("time_value", [1e308, -1e308])
def test_absurd_sample_times_are_refused(tmp_path, time_value):
    # GIVEN a bundle whose last sample is at +-1e308 s
    data = json.loads(BUNDLE.read_text())
    data["samples"][-1]["time"] = time_value
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    # WHEN loaded THEN refused (it would print "-inf s")
    with pytest.raises(BadBundle, match="a sample's time"):
        load_bundle(path)


def test_saved_bundles_are_private_to_their_owner(tmp_path):
    # GIVEN an existing world-readable file WHEN a bundle is saved over it THEN it is 0600
    path = tmp_path / "b.json.zst"
    path.write_bytes(b"")
    path.chmod(0o644)
    save_bundle(load_bundle(BUNDLE), path)
    assert path.stat().st_mode & 0o777 == 0o600


# --- the command line ---------------------------------------------------------------------------


def once_without_a_job(monkeypatch):
    """`watch --once` on a fake job: attach and capture stubbed, the bundle a golden one."""
    import hangdoc.live.attach
    import hangdoc.live.capture
    import hangdoc.live.probes

    bundle = load_bundle(BUNDLE)
    monkeypatch.setattr(hangdoc.live.attach, "find_job_waiting", lambda *a, **k: None)
    monkeypatch.setattr(hangdoc.live.probes, "make_probes", lambda options: types.SimpleNamespace(procfs=None))
    monkeypatch.setattr(hangdoc.live.capture, "snapshot_once", lambda *a: bundle)


def test_watch_once_onto_a_full_disk_is_one_line_and_exit_6(tmp_path, capsys, monkeypatch):
    # GIVEN a disk that fills as the bundle is written
    import hangdoc.bundle.files

    once_without_a_job(monkeypatch)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(hangdoc.bundle.files, "save_bundle", full)
    # WHEN `watch --once` saves THEN one line saying so, exit 6 (the bundle was not saved)
    rc, err = run_cli(capsys, "watch", "4242", "--once", "--out", str(tmp_path / "b.json"))
    assert rc == 6 and len(err) == 1 and "No space left" in err[0], err


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_an_out_under_proc_is_refused_before_the_capture():
    # GIVEN --out in /proc (access() may say writable to root) WHEN checked THEN refused up front
    with pytest.raises(BadOutput):
        check_writable("/proc/b.json")


@pytest.mark.parametrize("option", ["--interval", "--timeout", "--hang-after"])
def test_seconds_beyond_what_a_clock_can_wait_are_a_usage_error(capsys, option):
    # WHEN a span of 1e10 s is given THEN one usage line, exit 2, before any attach
    rc, err = run_cli(capsys, "watch", option, "1e10", "4242")
    assert rc == 2 and len(err) == 1 and "at most" in err[0], err


def test_the_wait_between_rounds_never_passes_the_timeout():
    # GIVEN a watch with --interval 1000 and --timeout 3, its analysis stubbed to "no verdict yet"
    bundle = node_bundle(0, 1, 0, 1_700_000_000.0, samples=1, workers=1, ranks_per_node=2)
    watcher = Watcher(bundle.job.launcher_pid, Probes(), WatchOptions(interval_s=1000.0, timeout_s=3.0),
                      job=bundle.job, samples=deque(bundle.samples))
    waits = []

    class Stop(Exception):
        pass

    def wait(delay):
        waits.append(delay)
        raise Stop

    watcher.bundle = lambda: bundle
    watcher.assess = lambda b: (b, types.SimpleNamespace(verdict=Verdict.SUSPECT), None)
    watcher._wait = wait
    # WHEN it runs to its first wait
    with pytest.raises(Stop):
        watcher.run()
    # THEN it waits at most what is left of the timeout
    assert waits and waits[0] <= 3.0

