"""Every input is read within a budget (hangdoc/base/limits.py, docs/bundle.md "Budgets"): a crafted
bundle or Flight Recorder dump costs one line, never gigabytes, a traceback or a wait forever."""
from __future__ import annotations

import errno
import json
import os
import pickle
import resource
import subprocess
import sys
import types
from collections import deque
from pathlib import Path

import pytest
import zstandard

from hangdoc.analyze.diagnose import node_digest
from hangdoc.base.errors import BadBundle, BadOutput
from hangdoc.base import limits
from hangdoc.base.limits import MAX_BUNDLE_JSON_BYTES, MAX_DUMP_OBJECTS, MAX_LOG_LINES
from hangdoc.bundle import codec
from hangdoc.bundle.files import check_writable, load_bundle, load_head, save_bundle
from hangdoc.cli import main
from hangdoc.collect.flight_recorder import fr_config
from hangdoc.inputs.flight_dumps import BadDump, read_dump
from hangdoc.live.flight import collect_dumps
from hangdoc.collect.snapshot import Probes
from hangdoc.live.options import WatchOptions
from hangdoc.live.watcher import Watcher
from hangdoc.model import ProcessInfo, Role, Verdict
from tests.factories import node_bundle

# Bounds, fuzzers and builds of tens of seconds: the full suite runs them, the fast tier (`make fast`) does not.
pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
BUNDLE = GOLDEN / "barrier-mismatch" / "bundle.json"
GIB = 1 << 30


def fr_entry(frames: int = 100) -> dict:
    return {"process_group": ["0", "default_pg"], "collective_seq_id": 7, "profiling_name": "gloo:all_reduce",
            "state": "scheduled", "input_sizes": [[4]], "input_dtypes": ["Float"],
            "frames": [{"name": f"f{i}", "filename": "train.py", "line": i} for i in range(frames)]}


def fr_dump(entries: list, **extra) -> dict:
    return {"version": "2.10", "entries": entries, "pg_status": {"0": {"last_enqueued_collective": 7}}, **extra}


def run_cli(capsys, *args: str) -> tuple[int, list[str]]:
    rc = main(list(args))
    return rc, capsys.readouterr().err.strip().splitlines()


def limited(args: list[str], memory: int = GIB, timeout: float = 60) -> subprocess.CompletedProcess:
    """`python ARGS` in a child limited to `memory` bytes of address space: what a user's `hangdoc`
    costs, measured where going past the budget is a MemoryError, not the machine's OOM killer."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    try:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              preexec_fn=limit, env=dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", COLUMNS="120"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args[:4])} ... took more than {timeout:g} s")


def hangdoc_limited(*args: str, memory: int = GIB, timeout: float = 60) -> tuple[int, str, list[str]]:
    """`hangdoc ARGS` within `memory` bytes: (exit code, stdout, stderr lines)."""
    done = limited(["-m", "hangdoc", *args], memory, timeout)
    return done.returncode, done.stdout, done.stderr.strip().splitlines()


def one_error_line(rc: int, err: list[str]) -> bool:
    return rc == 2 and len(err) == 1 and err[0].startswith("hangdoc: error: ") and "Traceback" not in err[0]


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


def shared_pickle(path: Path, shares: int = 200_000) -> Path:
    """The issue's input: one 100-frame entry named `shares` times through the pickle's memo."""
    path.write_bytes(pickle.dumps(fr_dump([fr_entry()] * shares), protocol=4))
    return path


def test_report_on_a_400_kb_pickle_naming_one_entry_200000_times_is_one_line_within_1_gib(tmp_path):
    # GIVEN the 400 KB pickle that drove `hangdoc report` past 4 GiB
    path = shared_pickle(tmp_path / "trace_0")
    assert path.stat().st_size < 500_000
    # WHEN `hangdoc report` reads it in a process limited to 1 GiB
    rc, _, err = hangdoc_limited("report", str(path))
    # THEN one line saying why, exit 2: no MemoryError
    assert one_error_line(rc, err) and "values" in err[0], err[-5:]


def test_the_watch_meets_that_pickle_under_the_jobs_dump_prefix_as_one_error_line_within_1_gib(tmp_path):
    # GIVEN the same pickle where a rank's Flight Recorder dumps go
    shared_pickle(tmp_path / "trace_0")
    script = ("import json, sys\n"
              "from hangdoc.collect.flight_recorder import fr_config\n"
              "from hangdoc.live.flight import collect_dumps\n"
              "from hangdoc.model import ProcessInfo, Role\n"
              "info = ProcessInfo(pid=5, ppid=1, role=Role.RANK, cmdline=(), exe=None, start_time=0.0,\n"
              "                   env={'TORCH_FR_DUMP_TEMP_FILE': sys.argv[1]}, rank=0)\n"
              "records, errors = collect_dumps([fr_config(info)], trigger=False)\n"
              "print(json.dumps([len(records), list(errors)]))\n")
    # WHEN the watch collects the job's dumps, in a process limited to 1 GiB
    done = limited(["-c", script, str(tmp_path / "trace_")])
    # THEN no record and one line in flight_errors: no MemoryError
    assert done.returncode == 0, done.stderr[-2000:]
    records, errors = json.loads(done.stdout)
    assert records == 0 and len(errors) == 1 and "values" in errors[0] and "\n" not in errors[0]


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


def two_ranks_dumps(folder: Path, frames: list[dict]) -> Path:
    """Rank 0 issued collective #8 from `frames`, rank 1 never did: the report names where #8 was issued."""
    issued = dict(fr_entry(0), collective_seq_id=8, frames=frames)
    done = dict(fr_entry(2), state="completed", retired=True)
    (folder / "trace_0").write_bytes(pickle.dumps(fr_dump([done, issued], pg_status={
        "0": {"last_enqueued_collective": 8, "last_completed_collective": 7}})))
    (folder / "trace_1").write_bytes(pickle.dumps(fr_dump([done], pg_status={
        "0": {"last_enqueued_collective": 7, "last_completed_collective": 7}})))
    return folder


def test_a_frame_line_of_20000_digits_does_not_break_the_report(tmp_path, capsys):
    # GIVEN two ranks' dumps, rank 0's stuck collective issued from a frame whose line is 20,000 digits
    two_ranks_dumps(tmp_path, [{"name": "f0", "filename": "train.py", "line": 10**20_000 - 1}])
    # WHEN `hangdoc report` reads them (naming where #8 was issued raised a ValueError before)
    rc = main(["report", str(tmp_path)])
    out, err = capsys.readouterr()
    # THEN the report is printed, the line read as unknown (0), and the hang named
    assert rc == 3, err
    assert "rank 0 issued #8 at f0 (train.py:0)" in out and "Traceback" not in err


@pytest.mark.parametrize("name", ["wandb login" + " --a" * 40 + " -", "a." * 100_000, "pass" * 50_000])
def test_frame_names_shaped_against_the_redaction_cost_a_report_of_seconds(tmp_path, name):
    # GIVEN dumps whose stuck collective was issued from a frame with a crafted name (a few KB): the
    # redaction every printed string goes through once took forever on the first, minutes on the others
    two_ranks_dumps(tmp_path, [{"name": name, "filename": "train.py", "line": 3}])
    # WHEN `hangdoc report` reads them, within 60 s
    rc, out, err = hangdoc_limited("report", str(tmp_path), timeout=60)
    # THEN the report is printed
    assert rc == 3 and "rank 0 issued #8 at " in out, err[-5:]


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


def test_report_on_nodes_whose_digests_claim_a_billion_nodes_is_one_line_within_1_gib(tmp_path):
    # GIVEN two nodes of 40 ranks each (diagnosed by class: the census of missing nodes is walked),
    # their digests claiming group_world_size 10^9
    from tests.factories import node_bundle, save_node

    for node in range(2):
        path = save_node(node_bundle(node, 2, 1, 1_700_000_000.0, ranks_per_node=40, workers=0, samples=3),
                         tmp_path / f"node{node}.json")
        data = json.loads(path.read_bytes())
        data["digest"]["group_world_size"] = 10**9
        path.write_text(json.dumps(data))
    # WHEN `hangdoc report DIR` reads them in a process limited to 1 GiB
    rc, _, err = hangdoc_limited("report", str(tmp_path))
    # THEN one line naming the field: no census of a billion nodes, no MemoryError
    assert one_error_line(rc, err) and "group_world_size" in err[0], err[-5:]


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


def test_report_on_a_64_kb_zstd_bomb_that_declares_its_2_gib_is_one_line_within_1_gib(tmp_path):
    # GIVEN 2 GiB of zeros compressed as the zstd command does from a file: the size in the frame header
    writer = zstandard.ZstdCompressor(level=1).compressobj(size=2 * GIB)
    zeros = b"\0" * (1 << 20)
    path = tmp_path / "bomb.json.zst"
    path.write_bytes(b"".join(writer.compress(zeros) for _ in range(2048)) + writer.flush())
    assert path.stat().st_size < 100_000
    # WHEN `hangdoc report` reads it in a process limited to 1 GiB
    rc, _, err = hangdoc_limited("report", str(path))
    # THEN one line, refused from the header: nothing decompressed, no MemoryError
    assert one_error_line(rc, err) and "its header says" in err[0], err[-5:]


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


def test_report_on_20_m_log_lines_in_a_few_kb_of_zstd_is_one_line_in_seconds(tmp_path):
    # GIVEN a bundle whose log tail holds 20 M empty lines, compressed as the zstd command does (size declared)
    data = json.loads(BUNDLE.read_text())
    head, _, tail = json.dumps(dict(data, logs=[{"source": "x.log", "lines": ["MARK"]}])).partition('"MARK"')
    body = head.encode() + b'"",' * 20_000_000 + b'""' + tail.encode()
    path = tmp_path / "lines.json.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=19).compress(body))
    assert path.stat().st_size < 20_000
    # WHEN `hangdoc report` reads it in a process limited to 1 GiB and 60 s (it took 97 s, then printed a report)
    rc, _, err = hangdoc_limited("report", str(path))
    # THEN one line, refused by its count of values before any line is built
    assert one_error_line(rc, err) and "JSON values" in err[0], err[-5:]


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


def test_docs_state_the_budgets_the_code_keeps():
    # GIVEN docs/bundle.md's table of budgets WHEN read THEN each of limits.py's figures is the one it states
    text = (ROOT / "docs" / "bundle.md").read_text()
    table = text[text.index("### Budgets"):text.index("## The loop mark")]
    stated = [f"{limits.MAX_BUNDLE_FILE_BYTES >> 20} MiB", f"{limits.MAX_BUNDLE_JSON_BYTES >> 20} MiB",
              f"{limits.MAX_BUNDLE_VALUES:,}", f"{limits.MAX_LOG_LINES:,}", f"0..{limits.MAX_WORLD:,}",
              f"+-10^{len(str(int(limits.MAX_TIME))) - 1} s", f"10^{len(str(int(limits.MAX_SECONDS))) - 1} s",
              f"{limits.MAX_DUMP_BYTES >> 20} MiB", f"{limits.MAX_DUMP_OBJECTS:,}", f"{limits.MAX_DUMP_DEPTH} levels",
              f"+-2^{limits.MAX_NUMBER.bit_length() - 1}"]
    assert [figure for figure in stated if figure not in table] == []


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


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_watch_once_with_out_under_proc_is_one_line_before_the_capture(capsys, monkeypatch):
    # GIVEN a job to capture (stubbed) WHEN `watch --once --out /proc/b.json` THEN one line, exit 2
    once_without_a_job(monkeypatch)
    rc, err = run_cli(capsys, "watch", "4242", "--once", "--out", "/proc/b.json")
    assert one_error_line(rc, err) and "/proc" in err[0], err


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
    def judged(b, at_s=0.0, ended=False):
        from hangdoc.live.step import Decision

        watcher.decision = Decision(None)
        return b, types.SimpleNamespace(report=types.SimpleNamespace(verdict=Verdict.SUSPECT), stop=None)

    watcher.judge_round = judged
    watcher._wait = wait
    # WHEN it runs to its first wait
    with pytest.raises(Stop):
        watcher.run()
    # THEN it waits at most what is left of the timeout
    assert waits and waits[0] <= 3.0

