"""`hangdoc check` reads what it did not write within budgets, as `report` does: a FIFO or a device
is refused by its type before it is opened, and bytes, values, depth and time are bounded; past a
budget it is one line and exit 2 (a shard past one is an unreadable shard), never a traceback, a
MemoryError or a wait for ever. Each command runs in a child limited to 1 GiB of address space."""
from __future__ import annotations

import gzip
import io
import json
import os
import resource
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

# Bounds, fuzzers and builds of tens of seconds: the full suite runs them, the fast tier (`make fast`) does not.
pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30


def limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (GiB, GiB))


def check(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="160", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "hangdoc", "check", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, preexec_fn=limited)


def one_line_exit_2(done: subprocess.CompletedProcess, *words: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("hangdoc: error: "), lines
    assert all(word in lines[0] for word in words), lines


def test_a_fifo_as_the_data_list_is_refused_not_waited_on(tmp_path):
    # GIVEN a FIFO nobody writes, named as the list WHEN checked THEN one line, exit 2, at once
    fifo = tmp_path / "data.list"
    os.mkfifo(fifo)
    one_line_exit_2(check("data", str(fifo), "-w", "2", "-k", "2", timeout=30), "FIFO")


def test_a_fifo_as_a_shard_is_an_unreadable_shard_not_a_wait(tmp_path):
    # GIVEN a list naming a FIFO as its shard
    fifo = tmp_path / "s0.tar"
    os.mkfifo(fifo)
    (tmp_path / "data.list").write_text(f"{fifo}\n")
    # WHEN checked THEN the report says the shard is not a regular file, promptly
    done = check("data", str(tmp_path / "data.list"), "-w", "1", "-k", "1", "--format", "json", timeout=30)
    assert done.returncode in (0, 1), done.stderr
    shard = json.loads(done.stdout)["facts"]["shards"][0]
    assert shard["status"] == "unreadable" and "FIFO" in shard["error"]


def test_dev_zero_as_the_data_list_is_refused_by_its_type():
    one_line_exit_2(check("data", "/dev/zero", "-w", "2", "-k", "2"), "character device")


@pytest.mark.parametrize("workers", [["-w", "100000000", "-k", "1"], ["-w", "100000", "-k", "100000"]])
def test_a_world_beyond_the_budget_is_one_line_not_a_memory_error(tmp_path, workers):
    (tmp_path / "data.list").write_text("/nonexistent/s0.tar\n")
    one_line_exit_2(check("data", str(tmp_path / "data.list"), *workers), "budget")


def test_a_raw_list_line_nested_100000_deep_is_a_bad_line(tmp_path):
    # GIVEN a raw list whose second line nests 100,000 deep
    (tmp_path / "a.wav").write_bytes(b"RIFF")
    good = json.dumps({"key": "a", "wav": str(tmp_path / "a.wav"), "txt": "x"})
    (tmp_path / "raw.list").write_text(good + "\n" + '{"key": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    # WHEN checked THEN it is a bad line of the report, not a RecursionError
    done = check("data", str(tmp_path / "raw.list"), "-w", "1", "-k", "1", "--format", "json")
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr[-2000:]
    bad = json.loads(done.stdout)["facts"]["bad_lines"]
    assert len(bad) == 1 and "nested" in bad[0]["why"], bad


def test_a_list_beyond_the_line_budget_is_one_line_at_once(tmp_path):
    # GIVEN 1,000,000 shards, none of them there (it took 76 s and printed them all)
    with open(tmp_path / "data.list", "w") as f:
        f.writelines(f"/nonexistent/shard_{i:07d}.tar\n" for i in range(1_000_000))
    # WHEN checked THEN one line naming the budget, in seconds
    one_line_exit_2(check("data", str(tmp_path / "data.list"), "-w", "8", "-k", "4", timeout=30), "budget")


def gz_shard_claiming(path: Path, claimed: int) -> None:
    """A gzip'd tar whose one member's header claims `claimed` bytes of zeros (a few MB on disk)."""
    info = tarfile.TarInfo("u0.wav")
    info.size = claimed
    header = info.tobuf(format=tarfile.USTAR_FORMAT)
    zeros = bytes(1 << 20)
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(header)
        for _ in range(claimed >> 20):
            out.write(zeros)


def test_a_member_whose_header_claims_1_3_gb_is_refused_from_its_header(tmp_path):
    # GIVEN a compressed shard one of whose members claims 1.3 GB (zeros: 1.3 MB of gzip)
    gz_shard_claiming(tmp_path / "s0.tar.gz", 1300 << 20)
    (tmp_path / "data.list").write_text(f"{tmp_path / 's0.tar.gz'}\n")
    # WHEN it is sampled THEN it is an unreadable shard that names the claim: no MemoryError,
    # and nothing of it was decompressed to a scratch file
    done = check("data", str(tmp_path / "data.list"), "-w", "1", "-k", "1", "--format", "json", timeout=120)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr[-2000:]
    shard = json.loads(done.stdout)["facts"]["shards"][0]
    assert shard["status"] == "unreadable" and "claims" in shard["error"], shard


def test_a_fifo_or_dev_zero_as_the_checkpoint_is_refused_by_its_type(tmp_path):
    fifo = tmp_path / "ckpt.pt"
    os.mkfifo(fifo)
    one_line_exit_2(check("checkpoint", str(fifo), timeout=30), "FIFO")
    one_line_exit_2(check("checkpoint", "/dev/zero", timeout=30), "character device")


def test_param_groups_of_the_wrong_type_is_described_not_a_traceback(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save({"model": {"w": torch.zeros(2)}, "optimizer": {"state": {}, "param_groups": 3}, "epoch": 1},
               tmp_path / "ckpt.pt")
    done = check("checkpoint", str(tmp_path / "ckpt.pt"), "--format", "json")
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "param_groups a int" in done.stdout


def test_a_checkpoint_of_shared_references_is_refused_by_its_value_budget(tmp_path):
    # GIVEN a 2 KB checkpoint whose one list is shared 2^40 times over 40 levels
    torch = pytest.importorskip("torch")
    layer: list = [0] * 10
    for _ in range(40):
        layer = [layer, layer]
    torch.save({"model": {"w": torch.zeros(2)}, "extra": layer}, tmp_path / "ckpt.pt")
    # WHEN checked THEN one line naming the budget, exit 2
    one_line_exit_2(check("checkpoint", str(tmp_path / "ckpt.pt")), "budget")


def test_a_checkpoint_slow_to_load_is_stopped_at_its_time_budget(tmp_path):
    # GIVEN a 4.6 MB checkpoint of 60,000 views of one storage: torch's weights-only unpickler,
    # written in Python, takes about 10 s on it (a crafted 1.8 MB one ran past 60 s)
    torch = pytest.importorskip("torch")
    from hangdoc.base.errors import HangdocError
    from hangdoc.check.ckpt_load import load_checkpoint

    base = torch.zeros(3)
    torch.save({"model": {f"l{i}": base[i % 3:] for i in range(60_000)}}, tmp_path / "ckpt.pt")
    # WHEN it is loaded with a budget of 1 s THEN it is refused, in about that time
    import time

    began = time.monotonic()
    with pytest.raises(HangdocError, match="budget"):
        load_checkpoint(tmp_path / "ckpt.pt", seconds=1)
    assert time.monotonic() - began < 5


@pytest.mark.parametrize("mib, words", [(300, ("archive/data.pkl", "bytes")), (100, ("8,000,000 values",))],
                         ids=["past-the-bytes", "past-the-values"])
def test_a_checkpoint_whose_small_zip_unpacks_to_a_pickle_of_millions_of_values_is_refused_in_seconds(
        tmp_path, mib, words):
    # GIVEN a .pt of a few hundred KB whose archive/data.pkl is `mib` MiB of `N` opcodes, each a value
    # (300 MiB: exit 2 after 131.7 s, past the 120 s budget, at 998 MB)
    pytest.importorskip("torch")
    from tests.factories import pickle_bomb_checkpoint

    path = pickle_bomb_checkpoint(tmp_path / "bomb.pt", mib)
    # WHEN checked, in a child limited to 1 GiB
    done = check("checkpoint", str(path), timeout=20)
    # THEN one line naming the budget, within an input's 20 s: its values are counted as it streams
    one_line_exit_2(done, "budget", *words)


def test_docs_state_the_check_budgets_the_code_keeps():
    # GIVEN docs/check.md's table of budgets WHEN read THEN each of limits.py's figures is the one it states
    from hangdoc.base import limits

    text = (ROOT / "docs" / "check.md").read_text()
    table = text[text.index("## Budgets"):text.index("## Limits")]
    stated = [f"{limits.MAX_LIST_BYTES >> 20} MiB", f"{limits.MAX_LIST_ENTRIES:,}", f"nested {limits.MAX_LIST_DEPTH} deep",
              f"{limits.MAX_WORLD:,} ranks", f"{limits.MAX_CHECK_WORKERS:,} workers", f"{limits.MAX_MEMBER_BYTES >> 30} GiB",
              f"{limits.MAX_SAMPLE_TAR_BYTES >> 30} GiB", f"{limits.MAX_CHECKPOINT_OBJECTS:,}",
              f"nested {limits.MAX_CHECKPOINT_DEPTH} deep", f"{limits.CHECKPOINT_LOAD_SECONDS} s",
              f"{limits.MAX_CHECKPOINT_PICKLE_BYTES >> 20} MiB", f"{limits.MAX_CHECKPOINT_PICKLE_VALUES:,} values"]
    assert [figure for figure in stated if figure not in table] == []
