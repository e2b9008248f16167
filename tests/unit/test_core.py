"""Bundles in, facts out: serde round trip, redaction, frame classification, bad bundles."""
from __future__ import annotations

import json
import random

import pytest

from hangdoc.base.words import rank_ranges
from hangdoc.analyze.classify import classify_rank, classify_worker
from hangdoc.bundle.files import bundle_from_json, load_bundle, save_bundle
from hangdoc.base.errors import BadBundle
from hangdoc.model import (BUNDLE_SCHEMA, Bundle, GpuState, Host, IoCounters, Job, OpenFile,
                           ProcessInfo, ProcSample, ProcStat, Role, Snapshot, Stack, Thread)
from hangdoc.base.redact import REDACTED, filter_env, redact_cmdline, redact_text
from hangdoc.base.serde import from_dict, to_dict
from tests.factories import frame


def site(name, file, line=1, native=False):
    return frame(name, "/site-packages/" + file, line, native)


def sample(pid, frames, active=False, syscall=None, state="S"):
    stack = Stack(threads=(Thread(tid=pid, name="MainThread", active=active, owns_gil=False,
                                  frames=tuple(frames)),))
    proc = ProcStat(state=state, wchan=None, syscall=syscall, utime_s=1.0, stime_s=0.5, rss_bytes=1 << 20,
                    num_threads=3, io=IoCounters(1, 2, 3, 4, 5, 6),
                    open_files=(OpenFile(fd=5, path="/data/a.tar.bz2", pos=100, size=1000),))
    return ProcSample(pid=pid, alive=True, proc=proc, stack=stack)


C10D = "torch/distributed/distributed_c10d.py"
DL = "torch/utils/data/dataloader.py"


def small_bundle() -> Bundle:
    rank = ProcessInfo(pid=10, ppid=1, role=Role.RANK, cmdline=("python", "train.py"), exe="/usr/bin/python3",
                       start_time=1.0, env={"RANK": "0"}, rank=0, world_size=2, rank_pid=10)
    snap = Snapshot(time=100.0, took_s=0.05, gpu=GpuState(status="unavailable", reason="no driver"),
                    processes=(sample(10, [site("all_reduce", C10D), site("train", "train.py"),
                                           site("<module>", "train.py")]),))
    return Bundle(schema=BUNDLE_SCHEMA, hangdoc_version="0", created=1.0,
                  host=Host("h", "x86_64", "6.1", 2, "3.11", "2.13.0"),
                  job=Job(run_id="r", master_addr="127.0.0.1", master_port=29500, world_size=2,
                          launcher_pid=1, processes=(rank,)),
                  samples=(snap,))


def test_bundle_round_trips_through_json_unchanged():
    # GIVEN a bundle WHEN it goes to a dict, to JSON text and back THEN it is identical
    bundle = small_bundle()
    again = from_dict(Bundle, json.loads(json.dumps(to_dict(bundle))))
    assert again == bundle
    assert isinstance(again.samples, tuple) and again.job.processes[0].role is Role.RANK


def test_bad_bundles_get_one_clear_error(tmp_path):
    # GIVEN a truncated file, a newer schema, a foreign JSON and a missing file
    path = save_bundle(small_bundle(), tmp_path / "b.json")
    text = path.read_text()
    newer = json.loads(text)
    newer["schema"] = "hangdoc/bundle-v9"
    cases = {
        text[: len(text) // 2]: "not valid JSON",
        json.dumps(newer): "upgrade hangdoc",
        json.dumps({"hello": 1}): "not a hangdoc bundle",
        json.dumps({**json.loads(text), "bundle": {**json.loads(text)["bundle"], "job": 3}}): r"damaged: .*\$\.bundle\.job",
    }
    # WHEN each is read THEN BadBundle says what is wrong
    for content, message in cases.items():
        with pytest.raises(BadBundle, match=message):
            bundle_from_json(content)
    with pytest.raises(BadBundle, match="no such bundle"):
        load_bundle(tmp_path / "missing.json")
    assert load_bundle(path) == small_bundle()


def test_environment_keeps_only_the_allowlist_and_hides_tokens():
    env = {"RANK": "1", "WORLD_SIZE": "2", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz12",
           "AWS_SECRET_ACCESS_KEY": "x", "NCCL_DEBUG": "INFO", "TORCH_HUB_TOKEN": "abc",
           "MASTER_ADDR": "10.0.0.1", "TORCHELASTIC_RUN_ID": "84d9cc45-0b88-4066-a952-460b83f4e608",
           "PYTHONPATH": "/opt/code", "NCCL_IB_HCA": "Zx9kLm2PqR7sTuV4wXyZ1aBcDeFgHiJk"}
    kept = filter_env(env)
    assert "HF_TOKEN" not in kept and "AWS_SECRET_ACCESS_KEY" not in kept
    assert kept["TORCH_HUB_TOKEN"] == REDACTED and kept["NCCL_IB_HCA"] == REDACTED
    assert kept["RANK"] == "1" and kept["NCCL_DEBUG"] == "INFO"
    assert kept["TORCHELASTIC_RUN_ID"].startswith("84d9cc45")


def test_command_lines_and_log_lines_lose_their_secrets():
    argv = ("train.py", "--hf-token", "hf_abcdefghijklmnopqrstuv", "--api-key=sk-abcdefghijklmnopqrstuv",
            "--data", "/data/list.txt")
    assert redact_cmdline(argv) == ("train.py", "--hf-token", REDACTED, "--api-key=" + REDACTED,
                                    "--data", "/data/list.txt")
    assert "hunter2" not in redact_text("fetching https://bob:hunter2@example.com/x")
    assert "AKIAIOSFODNN7EXAMPLE" not in redact_text("key AKIAIOSFODNN7EXAMPLE used")


def test_rank_states_from_frames():
    cases = [
        ([site("all_reduce", C10D), site("train", "train.py")], False, "collective-wait", "all_reduce"),
        ([site("barrier", C10D), site("train", "train.py")], False, "collective-wait", "barrier"),
        ([site("Queue.get", "multiprocessing/queues.py"),
          site("_MultiProcessingDataLoaderIter._get_data", DL),
          site("_MultiProcessingDataLoaderIter._next_data", DL), site("train", "train.py")],
         False, "dataloader-wait", "DataLoader.__next__"),
        ([site("heavy", "train.py"), site("train", "train.py")], True, "compute", "heavy"),
        ([site("_save", "torch/serialization.py"), site("save", "torch/serialization.py")], True, "io", "_save"),
        ([site("_engine_run_backward", "torch/autograd/graph.py"), site("backward", "torch/_tensor.py")],
         False, "collective-wait", "DDP gradient all_reduce (backward)"),
        ([site("cudaStreamSynchronize", "libcudart.so", native=True), site("train", "train.py")],
         False, "collective-wait", "GPU sync (cudaStreamSynchronize)"),
        ([site("train", "train.py")], False, "idle", "train"),
    ]
    for frames, active, state, detail in cases:
        reading = classify_rank(sample(1, frames, active=active))
        assert (reading.state, reading.detail) == (state, detail), frames[0].name


def test_worker_states_from_frames():
    loop = [site("_worker_loop", "torch/utils/data/_utils/worker.py")]
    cases = [
        ([site("decompress", "bz2.py"), site("read", "tarfile.py")], True, None, "decompressing"),
        ([site("readframes", "wave.py"), site("read", "tarfile.py")], True, None, "decoding"),
        ([site("Queue.get", "multiprocessing/queues.py")], False, None, "idle"),
        ([site("__iter__", "dataset.py")], False, "202", "lock-wait"),
        ([site("_FileInFile.read", "tarfile.py")], True, None, "reading"),
    ]
    for frames, active, syscall, state in cases:
        assert classify_worker(sample(2, frames + loop, active=active, syscall=syscall)).state == state


def test_rank_ranges_are_compact():
    assert rank_ranges([5, 0, 1, 2, 3, 7, 8]) == "0-3,5,7-8"
    assert rank_ranges(list(range(512)) + list(range(513, 1024))) == "0-511,513-1023"


def test_rank_ranges_found_by_halving_are_the_runs_a_walk_over_neighbours_finds():
    def walk(ranks):
        runs: list[list[int]] = []
        for r in sorted(set(ranks)):
            if runs and runs[-1][-1] + 1 == r:
                runs[-1].append(r)
            else:
                runs.append([r])
        return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)

    # GIVEN sets of ranks of every density, duplicates and negatives among them, and a million in two runs
    rng = random.Random(7)
    cases = [[], [4], [-2, -1, 0, 3], [i for i in range(1 << 20) if i != 524289]]
    for _ in range(2000):
        density = rng.choice([0.02, 0.3, 0.7, 0.97, 1.0])
        size = rng.choice([2, 63, 64, 65, 130, 1000])
        cases.append([r for r in range(rng.randint(-3, 50), size * 2) if rng.random() < density] * rng.randint(1, 2))
    # THEN the ranges read as the walk reads them
    for ranks in cases:
        rng.shuffle(ranks)
        assert rank_ranges(ranks) == walk(ranks)
