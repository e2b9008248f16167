"""A property-based fuzzer over what `hangdoc report` reads from strangers: bundles (JSON), node
digests, Flight Recorder pickles and JSON dumps, and a corpus of crafted inputs (bombs, shared
references, deep nesting, FIFOs, absurd numbers, names that are not UTF-8, Markdown and credentials
shaped against the escaping and the redaction), with the lists, shards and checkpoints that broke
`hangdoc check`. Each input is one report (or check result) or one line and exit 2, in a process
limited to 1 GiB of address space and 20 s an input.

    python -m tests.unit.test_fuzz [--examples N] [--seed S]    # prints the figures as JSON
"""
from __future__ import annotations

import pytest

import argparse
import contextlib
import gc
import io
import json
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

# Bounds, fuzzers and builds of tens of seconds: the full suite runs them, the fast tier (`make fast`) does not.
pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
SEEDS = ("barrier-mismatch", "healthy-finished", "fr-straggler")
MEMORY_BYTES = 1 << 30
SECONDS_PER_INPUT = 20
UNIT_EXAMPLES = 12          # per strategy in `make test`; `make bench` runs more
HTML_CASES = {"times-2e11-apart"}     # crafted inputs whose break was in `--format html`
HEAVY_CASES = {"stack-750-frames-10000-procs"}     # crafted inputs whose break was in every format


# --- the crafted corpus -------------------------------------------------------------------------


def crafted(folder: Path) -> dict[str, list[str]]:
    """Inputs that broke hangdoc once, written from code: name -> the paths `report` is given."""
    import zstandard

    cases: dict[str, list[str]] = {}

    def write(name: str, data: bytes, file: str = "bundle.json") -> None:
        where = folder / name
        where.mkdir()
        (where / file).write_bytes(data)
        cases[name] = [str(where / file)]

    entry = {"process_group": ["0", ""], "collective_seq_id": 1, "profiling_name": "all_reduce", "state": "scheduled",
             "frames": [{"name": "f", "filename": "t.py", "line": 1}] * 8}
    write("fr-shared-200k", pickle.dumps({"version": "2.10", "entries": [entry] * 200_000, "pg_status": {}}), "trace_0")
    write("fr-json-deep", b'{"entries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "trace_0")
    write("fr-line-20000-digits", pickle.dumps({"version": "2.10", "pg_status": {}, "entries": [
        dict(entry, frames=[{"name": "f", "filename": "t.py", "line": 10**20_000}])]}), "trace_0")
    bundle = json.loads((GOLDEN / SEEDS[0] / "bundle.json").read_text())
    write("sample-time-1e308", json.dumps(dict(bundle, samples=[dict(s, time=-1e308) for s in bundle["samples"]])).encode())
    zeros, writer = b"\0" * (1 << 20), zstandard.ZstdCompressor(level=1).compressobj()
    write("zstd-bomb-2gib", b"".join(writer.compress(zeros) for _ in range(2048)) + writer.flush(), "b.json.zst")
    writer = zstandard.ZstdCompressor(level=1).compressobj(size=2048 << 20)    # as `zstd FILE`: the size declared
    write("zstd-bomb-2gib-declared", b"".join(writer.compress(zeros) for _ in range(2048)) + writer.flush(), "b.json.zst")
    write("zstd-claims-64gib", b"\x28\xb5\x2f\xfd\xe0" + (64 << 30).to_bytes(8, "little") + b"\x09\x00\x00{", "b.json.zst")
    head, _, tail = json.dumps(dict(bundle, logs=[{"source": "x", "lines": ["M"]}])).partition('"M"')
    writer = zstandard.ZstdCompressor(level=1).compressobj()
    lines = writer.compress(head.encode()) + b"".join(writer.compress(b'"",' * 1_000_000) for _ in range(20))
    write("log-lines-20m", lines + writer.compress(b'""' + tail.encode()) + writer.flush(), "b.json.zst")
    body = head.encode() + b'"",' * 20_000_000 + b'""' + tail.encode()
    write("log-lines-20m-declared", zstandard.ZstdCompressor(level=3).compress(body), "b.json.zst")
    del body
    (folder / "digest-world-1e9").mkdir()
    for node, data in enumerate(_digests_of_80_ranks()):     # diagnosed by class: the census is walked
        data["digest"]["group_world_size"] = 10**9
        (folder / "digest-world-1e9" / f"node{node}.json").write_text(json.dumps(data))
    cases["digest-world-1e9"] = [str(folder / "digest-world-1e9")]
    done = dict(entry, state="completed", retired=True)      # rank 0 issued #2 from a name shaped against redaction
    issued = dict(entry, collective_seq_id=2, frames=[{"name": "wandb login" + " --a" * 40 + " -", "filename": "t.py",
                                                       "line": 1}])
    write("fr-frame-name-redos", pickle.dumps({"version": "2.10", "entries": [done, issued], "pg_status": {
        "0": {"last_enqueued_collective": 2, "last_completed_collective": 1}}}), "trace_0")
    (folder / "fr-frame-name-redos" / "trace_1").write_bytes(pickle.dumps({"version": "2.10", "entries": [done],
        "pg_status": {"0": {"last_enqueued_collective": 1, "last_completed_collective": 1}}}))
    cases["fr-frame-name-redos"] = [str(folder / "fr-frame-name-redos")]
    from tests.factories import crowded_v1_bundle, deep_stack_bundle, far_apart_bundle

    write("ranks-200k-v1", crowded_v1_bundle(200_000), "b.json.zst")
    write("stack-200k-frames-2000-ranks", deep_stack_bundle(200_000, 2_000), "b.json.zst")
    write("times-2e11-apart", far_apart_bundle(1e11))       # read as --format html (HTML_CASES)
    os.mkfifo(folder / "fifo.json")
    cases["fifo"] = [str(folder / "fifo.json")]
    if os.path.exists("/dev/zero"):
        cases["dev-zero"] = ["/dev/zero"]
    # issue 35: names that are not UTF-8 (a lone surrogate, as os hands undecodable bytes over, and
    # the \xNN hangdoc keeps), credentials in the shapes the redactor missed, Markdown that escaped
    hostile = "caf\udce9 caf\\xe9 redis://:pw@h Authorization: Basic dXNlcjpwYXNz ghp_" + "K" * 36 + \
              " x `<img src=x>` \\`<img src=y>` ![i](http://e/x.png) [l](http://e) [r]: http://e"
    named = json.loads(json.dumps(bundle))
    for sample in named["samples"]:
        for proc in sample["processes"]:
            for thread in (proc.get("stack") or {}).get("threads", []):
                thread["name"] = hostile
                for frame in thread.get("frames") or []:
                    frame["filename"] = "/data/" + hostile + "/train.py"
            for opened in (proc.get("proc") or {}).get("open_files") or []:
                opened["path"] = "/data/" + hostile
    write("names-hostile", json.dumps(named).encode())
    round_four(folder, bundle, write, cases)
    return cases


def round_four(folder: Path, bundle: dict, write, cases: dict[str, list[str]]) -> None:
    """Inputs that broke `report` in the fourth round: one stack named by 10,000 processes
    (HEAVY_CASES: every format), a refused dump beside a bundle, impossible identities, credentials of
    the shapes once missed, and the bundle `run --out` saves of a command that failed before any
    process was watched."""
    from tests.factories import deep_stack_bundle

    write("stack-750-frames-10000-procs", deep_stack_bundle(750, 10_000, samples=1), "b.json.zst")
    where = folder / "fr-refused-beside-bundle"
    where.mkdir()
    (where / "bundle.json").write_text(json.dumps(bundle))
    (where / "fr_trace_rank_0").write_bytes(b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94"
                                            b"\x8c\x06system\x94\x93\x94\x8c\x04true\x94\x85\x94R\x94.")
    cases["fr-refused-beside-bundle"] = [str(where / "bundle.json"), str(where / "fr_trace_rank_0")]
    crash = json.loads((GOLDEN / "rank-sigkill" / "bundle.json").read_text())
    negative = json.loads(json.dumps(crash))
    for proc in negative["job"]["processes"]:
        proc["pid"] = -proc["pid"]
    write("identities-negative-pids", json.dumps(negative).encode())
    for proc in crash["job"]["processes"]:
        if proc["role"] == "rank":
            proc["rank"] = 0
    write("identities-two-rank-zeros", json.dumps(crash).encode())
    secrets = ("GET https://a.blob.core.windows.net/c?sv=1&sig=Zm9vYmFy Cookie: s=1 Set-Cookie: t=2 "
               "machine h login u password P4ss https://T0ken@github.com/x --key-passphrase KP mysql -pPW "
               "redis-cli -a PW")
    named = json.loads(json.dumps(bundle))
    named["logs"] = [{"source": "rank0.log", "lines": [secrets] * 3}]
    for proc in named["job"]["processes"]:
        proc["cmdline"] = proc["cmdline"] + secrets.split()
    for sample in named["samples"]:
        for proc in sample["processes"]:
            for thread in (proc.get("stack") or {}).get("threads", []):
                thread["name"] = secrets
    write("names-credentials-round-four", json.dumps(named).encode())
    write("run-ended-before-watch", _run_ended_before_watch())


def _run_ended_before_watch() -> bytes:
    """The bundle `run --out` saves of a command that failed before any process could be watched."""
    from hangdoc.bundle import codec
    from hangdoc.live.runner import saveable
    from hangdoc.model import BUNDLE_SCHEMA, Bundle, Host, Job, LogTail

    bundle = Bundle(schema=BUNDLE_SCHEMA, hangdoc_version="0", created=1_700_000_000.0,
                    host=Host(hostname="h", arch="x86_64", kernel="6", cpu_count=2, python_version=None,
                              torch_version=None),
                    job=Job(run_id=None, master_addr=None, master_port=None, world_size=None, launcher_pid=4242,
                            processes=()),
                    samples=(), logs=(LogTail(source="<output of the command>", lines=("boom",)),), exit_code=1)
    return codec.encode(saveable(bundle))


def crafted_check(folder: Path) -> dict[str, list[str]]:
    """Inputs that broke `hangdoc check` once (issue 35), written from code: name -> its arguments."""
    import gzip
    import tarfile

    import torch

    cases: dict[str, list[str]] = {}
    where = folder / "check"
    where.mkdir()
    os.mkfifo(where / "fifo.list")
    cases["check-fifo-list"] = ["data", str(where / "fifo.list"), "-w", "2", "-k", "2"]
    os.mkfifo(where / "fifo.tar")
    (where / "fifo-shard.list").write_text(f"{where / 'fifo.tar'}\n")
    cases["check-fifo-shard"] = ["data", str(where / "fifo-shard.list"), "-w", "1", "-k", "1"]
    if os.path.exists("/dev/zero"):
        cases["check-dev-zero-list"] = ["data", "/dev/zero", "-w", "2", "-k", "2"]
        cases["check-dev-zero-checkpoint"] = ["checkpoint", "/dev/zero"]
    (where / "one.list").write_text("/nonexistent/s0.tar\n")
    cases["check-world-1e8"] = ["data", str(where / "one.list"), "-w", "100000000", "-k", "1"]
    (where / "deep.list").write_text('{"key": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    cases["check-raw-line-100k-deep"] = ["data", str(where / "deep.list"), "-w", "1", "-k", "1"]
    with open(where / "million.list", "w") as f:
        f.writelines(f"/nonexistent/shard_{i:07d}.tar\n" for i in range(1_000_000))
    cases["check-1m-missing-shards"] = ["data", str(where / "million.list"), "-w", "8", "-k", "4"]
    info = tarfile.TarInfo("u0.wav")
    info.size = 1300 << 20
    with gzip.open(where / "claims.tar.gz", "wb", compresslevel=1) as out:
        out.write(info.tobuf(format=tarfile.USTAR_FORMAT))
        for _ in range(1300):
            out.write(bytes(1 << 20))
    (where / "claims.list").write_text(f"{where / 'claims.tar.gz'}\n")
    cases["check-member-claims-1.3gb"] = ["data", str(where / "claims.list"), "-w", "1", "-k", "1"]
    os.mkfifo(where / "fifo.pt")
    cases["check-fifo-checkpoint"] = ["checkpoint", str(where / "fifo.pt")]
    torch.save({"model": {"w": torch.zeros(2)}, "optimizer": {"state": {}, "param_groups": 3}}, where / "groups.pt")
    cases["check-param-groups-int"] = ["checkpoint", str(where / "groups.pt")]
    layer: list = [0] * 10
    for _ in range(40):
        layer = [layer, layer]
    torch.save({"model": {"w": torch.zeros(2)}, "extra": layer}, where / "shared.pt")
    cases["check-shared-references-2^40"] = ["checkpoint", str(where / "shared.pt")]
    from tests.factories import pickle_bomb_checkpoint

    for mib in (300, 100):      # past the pickle's bytes; within them, past its values
        cases[f"check-pickle-of-{mib}-mib-of-N"] = ["checkpoint", str(pickle_bomb_checkpoint(where / f"n{mib}.pt", mib))]
    return cases


def crafted_paths(folder: Path, name: str) -> list[str]:
    return [str(folder / name / "bundle.json")]


def _digests_of_80_ranks() -> list[dict]:
    """Two nodes of 40 ranks each, as saved by a watch: `report DIR` diagnoses them by class."""
    from tests.factories import node_bundle
    from hangdoc.analyze.diagnose import node_digest
    from hangdoc.bundle import codec

    bundles = [node_bundle(node, 2, 1, 1_700_000_000.0, ranks_per_node=40, workers=0, samples=3) for node in range(2)]
    return [json.loads(codec.encode(bundle, node_digest(bundle))) for bundle in bundles]


def _digest_bundle() -> dict:
    from hangdoc.analyze.diagnose import node_digest
    from hangdoc.bundle import codec
    from hangdoc.bundle.files import load_bundle

    bundle = load_bundle(GOLDEN / SEEDS[0] / "bundle.json")
    return json.loads(codec.encode(bundle, node_digest(bundle)))


# --- the strategies ------------------------------------------------------------------------------


def strategies():
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
                        st.sampled_from([10**12, -1, 2**63, 0, 1 << 20, (1 << 20) + 1]),
                        st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -1e308, 1e11]),
                        st.text(max_size=40), st.sampled_from(["\x1b[2J", "x" * 5000, "password=Hunter2Sekrit"]))
    values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=6),
                                                           st.dictionaries(st.text(max_size=12), inner, max_size=6)),
                          max_leaves=30)
    return st, values


def mutated(st, values, seed: dict):
    """A strategy: `seed` with a few values somewhere inside replaced."""

    @st.composite
    def build(draw):
        data = json.loads(json.dumps(seed))
        for _ in range(draw(st.integers(1, 4))):
            node, key = None, None
            here = data
            while isinstance(here, (dict, list)) and here and (node is None or draw(st.booleans())):
                keys = sorted(here) if isinstance(here, dict) else list(range(len(here)))
                node, key = here, draw(st.sampled_from(keys))
                here = here[key]
            if node is not None:
                node[key] = draw(values)
        return data
    return build()


def fr_dumps(st, values, shares: int):
    """FR-shaped dumps; in a pickle one entry may be shared `shares` times (JSON repeats it in full)."""
    entry = st.fixed_dictionaries({
        "process_group": st.one_of(values, st.just(["0", "default_pg"])),
        "collective_seq_id": values, "p2p_seq_id": values, "is_p2p": values, "profiling_name": values,
        "state": values, "input_sizes": values, "output_sizes": values, "input_dtypes": values,
        "time_created_ns": values, "duration_ms": values, "retired": values,
        "frames": st.one_of(values, st.lists(st.fixed_dictionaries(
            {"name": values, "filename": values, "line": values}), max_size=4)),
    })
    shared = st.tuples(entry, st.integers(1, shares)).map(lambda pair: [pair[0]] * pair[1])
    return st.fixed_dictionaries({
        "version": values, "entries": st.one_of(st.lists(entry, max_size=5), shared, values),
        "pg_config": st.one_of(values, st.just({"0": {"desc": "default_pg", "ranks": "[0, 1]"}})),
        "pg_status": st.one_of(values, st.dictionaries(st.text(max_size=3), st.dictionaries(
            st.sampled_from(["last_enqueued_collective", "last_started_collective", "last_completed_collective"]),
            values))),
    })


# --- running the inputs -----------------------------------------------------------------------------


class Stats:
    def __init__(self):
        self.tried = 0
        self.slowest = (0.0, "")
        self.failures: list[str] = []

    def report(self, name: str, paths: list[str], fmt: str = "text") -> None:
        """`hangdoc report PATHS`: a report, or one line and exit 2; never a crash, never over 20 s."""
        from hangdoc.cli import main

        err = io.StringIO()
        began = time.monotonic()
        signal.alarm(SECONDS_PER_INPUT)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                rc = main(["report", *paths, "--format", fmt])
            crash = None
        except BaseException:     # what must never happen: a traceback, MemoryError, the alarm
            rc, crash = None, traceback.format_exc()[-1500:]
        finally:
            signal.alarm(0)
            gc.unfreeze()     # `report` freezes what it loaded, for one run; here hundreds run in one process
            gc.collect()
        took = time.monotonic() - began
        self.tried += 1
        self.slowest = max(self.slowest, (took, name))
        last = err.getvalue().strip().splitlines()[-1:] or [""]
        if crash or rc not in (0, 2, 3, 4, 5, 7, 8) or (rc == 2 and not last[0].startswith("hangdoc: error: ")):
            self.failures.append(f"{name}: rc={rc} {crash or last[0][:200]}")

    def check(self, name: str, args: list[str]) -> None:
        """`hangdoc check ARGS`: a result (exit 0 or 1), or one line and exit 2; never a crash, never over 20 s."""
        from hangdoc.cli import main

        err = io.StringIO()
        began = time.monotonic()
        signal.alarm(SECONDS_PER_INPUT)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                rc = main(["check", *args, "--format", "json"])
            crash = None
        except BaseException:
            rc, crash = None, traceback.format_exc()[-1500:]
        finally:
            signal.alarm(0)
        took = time.monotonic() - began
        self.tried += 1
        self.slowest = max(self.slowest, (took, name))
        last = err.getvalue().strip().splitlines()[-1:] or [""]
        if crash or rc not in (0, 1, 2) or (rc == 2 and not last[0].startswith("hangdoc: error: ")):
            self.failures.append(f"{name}: rc={rc} {crash or last[0][:200]}")

    def figures(self, began: float) -> dict:
        return {"inputs": self.tried, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10,
                "slowest_s": round(self.slowest[0], 2), "slowest": self.slowest[1],
                "seconds": round(time.monotonic() - began, 1), "failures": self.failures}


def fuzz(examples: int, seed: int | None) -> dict:
    """Run the corpus and `examples` inputs of each strategy in this process; the figures."""
    from hypothesis import HealthCheck, given, seed as hseed, settings

    def alarm(signum, frame):
        raise TimeoutError(f"an input took more than {SECONDS_PER_INPUT} s")

    signal.signal(signal.SIGALRM, alarm)
    began, stats = time.monotonic(), Stats()
    st, values = strategies()
    options = settings(max_examples=examples, deadline=None, database=None, derandomize=seed is None,
                       suppress_health_check=list(HealthCheck))
    with tempfile.TemporaryDirectory(prefix="hangdoc-fuzz-") as tmp:
        folder = Path(tmp)
        for name, paths in crafted(folder).items():
            stats.report(name, paths, "html" if name in HTML_CASES else "text")
        for fmt in ("markdown", "json", "html"):
            stats.report(f"names-hostile --format {fmt}", crafted_paths(folder, "names-hostile"), fmt)
        for name in HEAVY_CASES:
            for fmt in ("html", "trace"):
                stats.report(f"{name} --format {fmt}", [str(folder / name / "b.json.zst")], fmt)
        for name, args in crafted_check(folder).items():
            stats.check(name, args)
        seeds = [json.loads((GOLDEN / name / "bundle.json").read_text()) for name in SEEDS]
        digest = _digest_bundle()

        def once(name: str, data: bytes, file: str, extra: tuple[str, bytes] | None = None) -> None:
            where = Path(tempfile.mkdtemp(dir=folder))
            (where / file).write_bytes(data)
            if extra:
                (where / extra[0]).write_bytes(extra[1])
            stats.report(f"{name} #{stats.tried}", [str(where)] if extra else [str(where / file)])

        def wrap(test):
            test = options(test)
            return hseed(seed)(test) if seed is not None else test

        @wrap
        @given(st.sampled_from(range(len(SEEDS))).flatmap(lambda i: mutated(st, values, seeds[i])))
        def bundles(data):
            once("bundle", json.dumps(data).encode(), "b.json")

        @wrap
        @given(mutated(st, values, {"digest": digest["digest"]}))
        def digests(data):
            node = dict(digest, digest=data["digest"])
            once("digest", json.dumps(node).encode(), "node0.json", ("node1.json", json.dumps(node).encode()))

        @wrap
        @given(fr_dumps(st, values, 50_000))
        def fr_pickles(data):
            once("fr-pickle", pickle.dumps(data), "trace_0")

        @wrap
        @given(fr_dumps(st, values, 20))
        def fr_json(data):
            once("fr-json", json.dumps(data).encode(), "trace_0.json")

        for run in (bundles, digests, fr_pickles, fr_json):
            run()
    return stats.figures(began)


def run_limited(examples: int, seed: int | None = None, timeout: float = 600) -> dict:
    """The fuzz in a child limited to 1 GiB of address space; its figures."""
    args = [sys.executable, "-m", "tests.unit.test_fuzz", "--examples", str(examples)]
    if seed is not None:
        args += ["--seed", str(seed)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", COLUMNS="120"))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_fuzzed_and_crafted_inputs_cost_one_line_within_1_gib_and_20_s():
    # GIVEN the crafted corpus and a few Hypothesis inputs of each kind (bundles, digests, FR dumps)
    # WHEN `hangdoc report` reads each in a process limited to 1 GiB and 20 s an input
    figures = run_limited(UNIT_EXAMPLES, timeout=300)
    # THEN each is a report or one line with exit 2: no traceback, no MemoryError, no timeout
    assert figures["failures"] == [], figures["failures"]
    assert figures["inputs"] >= 4 * UNIT_EXAMPLES


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.unit.test_fuzz")
    parser.add_argument("--examples", type=int, default=UNIT_EXAMPLES)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    print(json.dumps(fuzz(args.examples, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
