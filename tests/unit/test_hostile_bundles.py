"""Hostile or broken bundles (shared in issues and CI artifacts) cost one line and exit 2, within a
memory and time bound: never a traceback, never gigabytes."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

# Bounds, fuzzers and builds of tens of seconds: the full suite runs them, the fast tier (`make fast`) does not.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
SEED_CASES = ("healthy-finished", "barrier-mismatch", "worker-segfault")
MEMORY_BYTES = 1 << 30
SECONDS_PER_BUNDLE = 20

# Runs in a child with an address-space and CPU limit; reports (name, exit code, last stderr line, error).
CHILD = r"""
import contextlib, io, json, resource, signal, sys, traceback
resource.setrlimit(resource.RLIMIT_AS, ({mem}, {mem}))
from hangdoc.cli import main


def alarm(signum, frame):
    raise TimeoutError("took too long")

signal.signal(signal.SIGALRM, alarm)
results = []
for path in sys.argv[1:]:
    err = io.StringIO()
    signal.alarm({secs})
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(["report", path, "--format", "{fmt}"])
        crash = None
    except BaseException as exc:
        rc, crash = None, "".join(traceback.format_exception_only(type(exc), exc)).strip()
    signal.alarm(0)
    results.append([path, rc, err.getvalue().strip().splitlines()[-1:] , crash])
print(json.dumps(results))
"""


def mutate(data, rng: random.Random, depth: int = 0):
    """A copy of `data` with one value somewhere replaced by something a bundle never holds."""
    nasty = [10**12, -1, -10**12, 0, None, "", "x" * 1000, [], {}, 1e308, True, [[[]]], "\x1b[2J"]
    if isinstance(data, dict) and data:
        key = rng.choice(sorted(data))
        out = dict(data)
        out[key] = mutate(data[key], rng, depth + 1) if rng.random() < 0.8 else rng.choice(nasty)
        return out
    if isinstance(data, list) and data:
        i = rng.randrange(len(data))
        out = list(data)
        out[i] = mutate(data[i], rng, depth + 1) if rng.random() < 0.8 else rng.choice(nasty)
        return out
    return rng.choice(nasty)


def corpus(folder: Path) -> list[Path]:
    files = []

    def write(name: str, text: str) -> None:
        path = folder / f"{name}.json"
        path.write_text(text)
        files.append(path)

    for case in SEED_CASES:
        text = (GOLDEN / case / "bundle.json").read_text()
        data = json.loads(text)
        big = json.loads(text)
        big["job"]["world_size"] = 10**12
        write(f"{case}-world", json.dumps(big))
        for proc in big["job"]["processes"]:
            proc["world_size"] = 10**12
            proc["env"]["GROUP_WORLD_SIZE"] = str(10**12)
        write(f"{case}-world-everywhere", json.dumps(big))
        write(f"{case}-no-samples", json.dumps(dict(data, samples=[])))
        write(f"{case}-truncated", text[: len(text) // 2])
        rng = random.Random(case)
        for i in range(25):
            write(f"{case}-mutant-{i}", json.dumps(mutate(data, rng)))
        for i in range(25):   # deep inside: the processes and the samples drive the analysis
            inner = json.loads(text)
            inner["job"]["processes"] = mutate(inner["job"]["processes"], rng)
            inner["samples"][-1]["processes"] = mutate(inner["samples"][-1]["processes"], rng)
            write(f"{case}-inner-{i}", json.dumps(inner))
    write("deep-list", "[" * 200_000 + "]" * 200_000)
    write("deep-in-bundle", json.dumps({"schema": "hangdoc/bundle-v1"})[:-1] + ', "job": ' + "[" * 100_000 + "]" * 100_000 + "}")
    write("not-an-object", "[1, 2, 3]")
    write("empty", "")
    return files


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_hostile_bundles_cost_one_line_within_bounds(tmp_path, fmt):
    # GIVEN a corpus of hand-edited, truncated, deeply nested and randomly mutated bundles
    files = corpus(tmp_path)
    # WHEN `hangdoc report` reads each in a process limited to 1 GiB and 20 s a bundle
    script = CHILD.format(mem=MEMORY_BYTES, secs=SECONDS_PER_BUNDLE, fmt=fmt)
    done = subprocess.run([sys.executable, "-c", script, *map(str, files)], capture_output=True, text=True,
                          timeout=580, env=dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    # THEN none crashes, runs out of memory or time: each is a report (0/3/4/5) or one line, exit 2
    crashed = [(Path(p).name, crash) for p, rc, _, crash in results if crash]
    assert not crashed, crashed
    for path, rc, last, _ in results:
        assert rc in (0, 2, 3, 4, 5), (path, rc, last)
        if rc == 2:
            assert last and last[0].startswith("hangdoc: error: "), (path, last)
    named = {Path(p).stem: (rc, last) for p, rc, last, _ in results}
    assert named["healthy-finished-world"][0] == 2 and "world_size" in named["healthy-finished-world"][1][0]
    assert named["healthy-finished-no-samples"][0] == 2 and "no samples" in named["healthy-finished-no-samples"][1][0]
    assert named["deep-list"][0] == 2 and named["deep-in-bundle"][0] == 2


def _edited(tmp_path, edit) -> Path:
    data = json.loads((GOLDEN / "rank-sigkill" / "bundle.json").read_text())
    edit(data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    return path


def _negative_pids(data: dict) -> None:
    for proc in data["job"]["processes"]:
        pid = proc["pid"]
        proc["pid"] = -pid
        for sample in data["samples"]:
            for seen in sample["processes"]:
                if seen["pid"] == pid:
                    seen["pid"] = -pid


def _two_rank_zeros(data: dict) -> None:
    for proc in data["job"]["processes"]:
        if proc["role"] == "rank":
            proc["rank"] = 0


@pytest.mark.parametrize("edit, words", [(_negative_pids, "pids are positive"), (_two_rank_zeros, "both rank 0")],
                         ids=["negative-pids", "duplicate-ranks"])
def test_a_bundle_with_impossible_identities_is_refused_with_one_line(tmp_path, capsys, edit, words):
    # GIVEN the bundle of a crash (rank 1 killed), edited: negative pids, or both ranks standing as rank 0
    path = _edited(tmp_path, edit)
    # WHEN `hangdoc report` reads it (two rank 0s read as a healthy run)
    from hangdoc.cli import main

    rc = main(["report", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    # THEN one line says what is impossible in it, exit 2: never a verdict the edit flipped
    assert rc == 2 and len(err) == 1 and err[0].startswith("hangdoc: error: ") and words in err[0], err
