"""Flight Recorder dumps: read safely, analysed per group, cited by the flight-recorder rule.

Golden inputs in tests/flight_recorder/ (README there): dumps recorded from real torch 2.13 gloo
jobs, and hand-made NCCL-shaped dumps (no GPU here) for the 8-rank case and the dump pipe.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hangdoc.analyze.flight import flight_groups, flight_summary, fr_progress
from hangdoc.rules.flight_words import stuck_line
from hangdoc.report import judge
from hangdoc.bundle.files import bundle_from_json, load_bundle
from hangdoc.collect.flight_recorder import fr_config
from hangdoc.inputs.flight_dumps import load_dumps, read_dump
from hangdoc.live.flight import FlightCollector, collect_dumps
from hangdoc.inputs.evidence import report_inputs
from hangdoc.model import ProcessInfo, Role
from hangdoc.base.serde import to_dict

ROOT = Path(__file__).resolve().parents[2]
FR = ROOT / "tests" / "flight_recorder"
GOLDEN = ROOT / "tests" / "golden"


def rank_info(rank: int, env: dict[str, str], start_time: float = 0.0) -> ProcessInfo:
    return ProcessInfo(pid=1000 + rank, ppid=1, role=Role.RANK, cmdline=("python", "train.py"), exe=None,
                       start_time=start_time, env=env, rank=rank, world_size=8)


def hangdoc(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "hangdoc", *args], capture_output=True, text=True,
                          timeout=60, env=env)


# --- recorded gloo dumps ------------------------------------------------------------------------


def test_recorded_gloo_straggler_names_the_collective_and_the_rank_that_never_issued_it():
    # GIVEN the dumps of a real gloo job where rank 1 never issued all_reduce #7
    records, errors = load_dumps([FR / "gloo-straggler"])
    # WHEN they are analysed per group
    [group] = flight_groups(records)
    # THEN rank 0 entered #7 of the default group, rank 1 never did, and its last completed was #6
    assert errors == ()
    assert (group.stuck_seq, group.entered, group.missing) == (7, (0,), (1,))
    assert stuck_line(group) == ("rank 0 entered all_reduce #7 of the default group, rank 1 never did; "
                                 "its last completed collective was #6")


def test_pickle_and_json_forms_of_one_dump_agree_and_only_the_pickle_has_frames():
    # GIVEN rank 0's dump in both forms torch 2.13 writes
    pkl = read_dump(FR / "gloo-straggler" / "fr_trace_rank_0")
    js = read_dump(FR / "gloo-straggler" / "fr_trace_rank_0.json")
    # THEN the same collectives come out, and the pickle carries where #7 was issued
    assert (pkl.form, js.form) == ("pickle", "json")
    assert [(e.seq, e.op, e.retired) for e in pkl.entries] == [(e.seq, e.op, e.retired) for e in js.entries]
    assert pkl.entries[-1].frames[2].name == "train_step" and not js.entries[-1].frames


def test_recorded_gloo_mismatch_names_op_sizes_and_dtypes_per_rank():
    # GIVEN rank 0 in all_reduce float32 [4] and rank 1 in broadcast float64 [8], both as #7
    records, _ = load_dumps([FR / "gloo-mismatch"])
    [group] = flight_groups(records)
    # THEN the mismatch at #7 is found and said with each rank's op, sizes and dtype
    assert [(m.seq, m.what) for m in group.mismatches] == [(7, "op")]
    assert stuck_line(group) == ("ranks 0-1 entered collective #7 of the default group, but not the same one: "
                                 "rank 0 all_reduce [4] Float; rank 1 broadcast [8] Double")


def test_recorded_healthy_dumps_show_no_stuck_collective_and_give_progress():
    # GIVEN dumps of a job that completed everything, on two groups
    records, _ = load_dumps([FR / "gloo-healthy"])
    groups = flight_groups(records)
    bundle = load_bundle(GOLDEN / "compute-straggler" / "bundle.json")
    bundle = dataclasses.replace(bundle, flight_records=records)
    # THEN nothing is stuck, and fr_progress gives each rank's last completed default-group collective
    assert [g.label for g in groups] == ["the default group", "group 1"]
    assert all(g.stuck_seq is None for g in groups)
    assert fr_progress(bundle) == {0: 6, 1: 6}


# --- hand-made NCCL-shaped dumps ------------------------------------------------------------------


def test_report_on_nccl_dumps_alone_names_seq_and_the_missing_rank():
    # GIVEN eight hand-made NCCL-shaped dumps (ranks 0-6 in all_reduce #4812, rank 7 behind)
    # WHEN `hangdoc report DIR` reads them, with no bundle
    done = hangdoc("report", str(FR / "nccl-handmade"))
    # THEN it is a hang, rank 7 is the culprit, and the finding says which collective
    assert done.returncode == 3, done.stderr
    assert "HANG: rank 7 is the culprit" in done.stdout
    assert ("ranks 0-6 entered all_reduce #4812 of the default group, rank 7 never did; "
            "its last completed collective was #4811") in done.stdout
    assert "issued #4812 at _run_ddp_forward (parallel/distributed.py:1460)" in done.stdout


def test_dumps_beside_a_bundle_join_its_evidence(tmp_path):
    # GIVEN a real hang bundle without FR and the recorded straggler dumps next to it
    shutil.copy(GOLDEN / "compute-straggler" / "bundle.json", tmp_path / "node0.json")
    for f in (FR / "gloo-straggler").iterdir():
        shutil.copy(f, tmp_path / f.name)
    # WHEN the directory is reported
    bundle, report = report_inputs([tmp_path])
    report = report.report
    # THEN the live verdict stands and the flight-recorder rule cites the dumps
    assert report.verdict == "hang" and report.culprit_ranks == (1,)
    fr = next(f for f in report.findings if f.rule == "flight-recorder")
    assert fr.ranks == (1,) and "#7" in fr.title
    assert any(line.startswith("rank 1 live stack: heavy_compute") for line in fr.evidence)


def test_healthy_dumps_alone_are_not_a_hang():
    done = hangdoc("report", str(FR / "gloo-healthy"))
    assert done.returncode == 0 and "HEALTHY" in done.stdout


# --- nothing in a dump executes -------------------------------------------------------------------


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_pickle_is_refused_with_one_line_and_nothing_runs(tmp_path):
    # GIVEN a dump directory with good dumps and a pickle that would run a shell command
    marker = tmp_path / "pwned"
    for f in (FR / "gloo-straggler").glob("fr_trace_rank_[01]"):
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "fr_trace_rank_2").write_bytes(pickle.dumps({"entries": [_Payload(marker)]}))
    # WHEN hangdoc reads the directory
    records, errors = load_dumps([tmp_path])
    done = hangdoc("report", str(tmp_path))
    # THEN the bad file is refused in one line, the others are read, and the command never ran
    assert [r.rank for r in records] == [0, 1]
    assert len(errors) == 1 and "\n" not in errors[0] and "refused" in errors[0] and "posix.system" in errors[0]
    assert done.returncode == 3 and "fr_trace_rank_2: refused" in done.stderr
    assert not marker.exists()


def test_only_malicious_dumps_exit_2_with_one_line(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "fr_trace_rank_0").write_bytes(pickle.dumps(_Payload(marker)))
    done = hangdoc("report", str(tmp_path / "fr_trace_rank_0"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "refused" in done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("inside", [False, True], ids=["beside", "in-a-directory"])
def test_a_refused_dump_beside_a_bundle_is_a_line_of_flight_errors_and_the_report_goes_on(tmp_path, inside):
    # GIVEN a bundle of a hang and the only dump beside it, a pickle that would run a shell command
    marker = tmp_path / "pwned"
    where = tmp_path / "dumps" if inside else tmp_path
    where.mkdir(exist_ok=True)
    (where / "fr_trace_rank_0").write_bytes(pickle.dumps({"version": "2.10", "entries": [_Payload(marker)]}))
    bundle = GOLDEN / "barrier-mismatch" / "bundle.json"
    # WHEN `hangdoc report BUNDLE DUMP` (or BUNDLE DIR) reads them
    done = hangdoc("report", str(bundle), str(where if inside else where / "fr_trace_rank_0"))
    # THEN the report of the bundle, its exit code, and the dump refused in a line (it exited 2, no report)
    assert done.returncode == 3 and "HANG" in done.stdout, done.stderr[-1000:]
    assert "fr_trace_rank_0: refused, not read" in done.stderr
    assert not marker.exists()


# --- settings and the dump pipe ---------------------------------------------------------------------


def test_settings_come_from_the_rank_environment(tmp_path):
    on = fr_config(rank_info(3, {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": "/x/fr_",
                                 "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "p_")}))
    legacy = fr_config(rank_info(0, {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}))
    unset = fr_config(rank_info(0, {}))
    assert (on.state, on.buffer_size, on.dump_prefix, on.pipe, on.pipe_exists) == \
        ("on", 2000, "/x/fr_", str(tmp_path / "p_3.pipe"), False)
    assert (legacy.state, unset.state, unset.prefix_set) == ("off", "default", False)
    assert unset.dump_prefix.endswith("/torch/comm_lib_trace_rank_")


def test_with_no_prefix_set_torch_s_default_places_are_searched(tmp_path, monkeypatch):
    # GIVEN a rank that names no TORCH_FR_DUMP_TEMP_FILE, and its dump where torch 2.13 puts it then
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "torch").mkdir()
    shutil.copy(FR / "gloo-straggler" / "fr_trace_rank_1", tmp_path / "torch" / "comm_lib_trace_rank_1")
    # WHEN the dumps are collected THEN it is found there
    records, errors = collect_dumps([fr_config(rank_info(1, {}))], trigger=False)
    assert [(r.rank, r.source, r.trigger) for r in records] == \
        [(1, str(tmp_path / "torch" / "comm_lib_trace_rank_1"), "found")]


def _fake_watchdog(pipe: Path, dump: bytes, target: Path, stop: threading.Event) -> None:
    """What ProcessGroupNCCL's DumpPipe does: a non-blocking reader; any byte read means dump."""
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while not stop.is_set():
            try:
                if os.read(fd, 128):
                    target.write_bytes(dump)
                    return
            except BlockingIOError:
                pass
            time.sleep(0.02)
    finally:
        os.close(fd)


def test_writing_to_the_dump_pipes_collects_fresh_dumps_within_the_wait(tmp_path):
    # GIVEN two ranks whose "watchdog" reads <stem><rank>.pipe and then writes its NCCL-shaped dump
    # to <prefix><rank>, and a third rank whose pipe exists but nobody reads (a dead rank)
    stem, prefix = str(tmp_path / "pipe_"), str(tmp_path / "dump_")
    env = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": stem, "TORCH_FR_DUMP_TEMP_FILE": prefix}
    stop, threads = threading.Event(), []
    for rank in (0, 7, 5):
        os.mkfifo(f"{stem}{rank}.pipe")
    for rank in (0, 7):
        dump = (FR / "nccl-handmade" / f"nccl_trace_rank_{rank}").read_bytes()
        t = threading.Thread(target=_fake_watchdog, args=(Path(f"{stem}{rank}.pipe"), dump, Path(f"{prefix}{rank}"), stop))
        t.start()
        threads.append(t)
    time.sleep(0.1)
    configs = [fr_config(rank_info(r, env)) for r in (0, 5, 7)]
    try:
        # WHEN hangdoc triggers and collects
        started = time.monotonic()
        records, errors = collect_dumps(configs, wait_s=5.0)
        took = time.monotonic() - started
    finally:
        stop.set()
        for t in threads:
            t.join(2)
    # THEN both live ranks dumped on request, the dead rank's pipe cost nothing, and the wait was bounded
    assert sorted((r.rank, r.trigger) for r in records) == [(0, "pipe"), (7, "pipe")]
    assert errors == () and took < 5.0
    [group] = flight_groups(records)
    assert (group.stuck_seq, group.missing) == (4812, (7,))


def test_the_collector_reads_only_this_job_s_dumps_once_a_rank_is_stuck(tmp_path):
    # GIVEN a stale dump older than the job and a fresh one
    prefix = str(tmp_path / "fr_")
    shutil.copy(FR / "gloo-straggler" / "fr_trace_rank_0", prefix + "0")
    shutil.copy(FR / "gloo-straggler" / "fr_trace_rank_1", prefix + "1")
    os.utime(prefix + "1", (1000.0, 1000.0))
    from hangdoc.model import Job
    env = {"TORCH_FR_DUMP_TEMP_FILE": prefix}
    job = Job(None, None, None, 2, None, (rank_info(0, env, start_time=2000.0), rank_info(1, env, start_time=2000.0)))
    collector = FlightCollector(wait_s=0.5)
    # WHEN nothing is stuck THEN nothing is read; WHEN a rank is stuck THEN only the fresh dump
    assert collector.gather(job, stuck=False) is False and collector.records == ()
    assert collector.gather(job, stuck=True) is True
    assert [r.rank for r in collector.records] == [0]
    assert collector.gather(job, stuck=True) is False       # unchanged files are not read again


# --- the bundle --------------------------------------------------------------------------------------


def test_a_bundle_with_flight_records_round_trips_and_old_bundles_load():
    # GIVEN the golden bundle recorded with real FR dumps
    text = (GOLDEN / "fr-straggler" / "bundle.json").read_text()
    bundle = bundle_from_json(text)
    assert len(bundle.flight_records) == 2 and bundle.flight_config[0].buffer_size == 2000
    # THEN it round-trips exactly, and a bundle written before these fields existed still loads
    assert bundle_from_json(json.dumps(to_dict(bundle))) == bundle
    old = json.loads(text)
    for name in ("flight_records", "flight_config", "flight_errors", "ras"):
        old.pop(name)
    assert bundle_from_json(json.dumps(old)).flight_records == ()


def test_the_golden_fr_bundle_reports_the_sequence_number_and_the_rank():
    bundle = load_bundle(GOLDEN / "fr-straggler" / "bundle.json")
    fr = next(f for f in judge(bundle).report.findings if f.rule == "flight-recorder")
    assert fr.ranks == (1,)
    assert fr.title == "Rank 1 never issued all_reduce #11 of the default group, which rank 0 entered"


@pytest.mark.parametrize("name", ["compute-straggler", "healthy-finished"])
def test_bundles_without_dumps_do_not_fire_it(name):
    bundle = load_bundle(GOLDEN / name / "bundle.json")
    assert not [f for f in judge(bundle).report.findings if f.rule == "flight-recorder"]


def test_a_bundle_named_like_a_dump_is_still_a_bundle(tmp_path):
    # GIVEN a bundle saved as node0.json with its keys in another order (re-serialised by a tool)
    data = json.loads((GOLDEN / "compute-straggler" / "bundle.json").read_text())
    (tmp_path / "node0.json").write_text(json.dumps(dict(sorted(data.items()))))
    # WHEN it is reported THEN it is read as the bundle it is
    bundle, report = report_inputs([tmp_path / "node0.json"])
    report = report.report
    assert report.verdict == "hang" and bundle.flight_records == ()


# --- what ps and the live view show ---------------------------------------------------------------


def test_ps_and_the_live_view_say_whether_fr_is_on(tmp_path):
    from hangdoc.render.words import flight_words
    from hangdoc.collect.flight_recorder import rank_flight_text
    from hangdoc.collect.procfs import ProcFS
    from hangdoc.render.live import flight_note

    # GIVEN a rank whose environment turns FR on with a dump pipe that exists, and one with FR off
    os.mkfifo(tmp_path / "pipe_0.pipe")
    for pid, env in ((11, f"TORCH_FR_BUFFER_SIZE=2000\0TORCH_NCCL_DEBUG_INFO_PIPE_FILE={tmp_path}/pipe_\0"),
                     (12, "TORCH_FR_BUFFER_SIZE=0\0")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "environ").write_bytes(env.encode())
    procfs = ProcFS(str(tmp_path))
    # THEN ps words them per rank, and the live header sums them up
    assert rank_flight_text(11, 0, procfs) == f"on (2000 entries), pipe {tmp_path}/pipe_0.pipe"
    assert rank_flight_text(12, 1, procfs) == "off"
    assert rank_flight_text(13, 2, procfs) == "?"
    env = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{tmp_path}/pipe_"}
    configs = (fr_config(rank_info(0, env)), fr_config(rank_info(1, env)))
    assert flight_words(flight_summary(configs)) == "on (2000 entries), pipe on 1 of 2 ranks"
    bundle = load_bundle(GOLDEN / "fr-straggler" / "bundle.json")
    assert flight_note(judge(bundle).report) == " · flight recorder on (2000 entries), 2 dumps"


def test_ps_and_the_live_view_say_the_same_of_an_unset_flight_recorder(tmp_path):
    from hangdoc.collect.flight_recorder import rank_flight_text
    from hangdoc.collect.procfs import ProcFS
    from hangdoc.render.words import flight_words

    # GIVEN a rank that leaves TORCH_FR_BUFFER_SIZE unset
    (tmp_path / "11").mkdir()
    (tmp_path / "11" / "environ").write_bytes(b"RANK=0\0")
    # WHEN ps and the live view word its setting THEN they say the same words
    said = rank_flight_text(11, 0, ProcFS(str(tmp_path)))
    assert said == "unset (torch's default)"
    assert flight_words(flight_summary((fr_config(rank_info(0, {})),))) == said
