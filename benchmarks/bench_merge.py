"""Benchmark `hangdoc report DIR` over many nodes, 1,024 to 65,536 ranks.

For each size, N/8 synthetic node bundles (8 ranks a node, 8 DataLoader workers a rank,
3 samples a node on independent clocks, pids alike on every node as in containers) whose
stacks have the real shapes: every rank waits in all_reduce but one, which waits on its
DataLoader while its workers decompress bz2. They are written as `hangdoc watch` saves them
(generating them is not timed), then `hangdoc report DIR --format json` runs in a fresh
process (wall, peak RSS, verdict), and each stage is timed in another (`measure`).

    python -m benchmarks.bench_merge [RANKS ...]     # the table (default 1024 4096 16384 65536)
    python -m benchmarks.bench_merge --scale N       # one size; its last line is one JSON object
    python -m benchmarks.bench_merge --scale N --split   # and the time of each stage of the report
    python -m benchmarks.bench_merge --scale N --dir DIR # the bundles kept in DIR (reused when there)
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from factories import RANKS_PER_NODE, node_bundle, save_node   # tests/factories.py (see benchmarks/__init__.py)
from hangdoc.base.serde import to_json

def write_bundles(folder: Path, ranks: int, seed: int = 0, fmt: str = "v2", templated: bool = True,
                  jobs: int = 1) -> list[Path]:
    """The node bundles of a job of `ranks` ranks in `folder`: "v2" as `hangdoc watch` saves
    them (.json.zst), "v1" as the old uncompressed JSON. v2 `templated`: every node but the
    culprit's is one of TEMPLATES encoded bundles with its node's names and ranks patched in
    (`templated_nodes`), in `jobs` processes; otherwise each node is built, diagnosed and encoded."""
    nodes = max(1, ranks // RANKS_PER_NODE)
    culprit = culprit_of(ranks)
    t0 = 1.7e9 + 3600
    if fmt == "v2" and templated:
        return templated_nodes(folder, nodes, culprit, t0, seed, jobs)
    paths = []
    for node in range(nodes):
        bundle = node_bundle(node, nodes, culprit, t0, seed)
        if fmt == "v1":
            path = folder / f"node{node:04d}.json"
            path.write_bytes(to_json(bundle))
        else:
            path = save_node(bundle, folder / f"node{node:04d}.json.zst")
        paths.append(path)
    return paths


# A node's bundle built at this node index names it (and its ranks) by numbers no other field
# holds; each is patched with the node's own. TEMPLATES of them, each with its own random clock
# phase and readings, stand for the ordinary nodes in turn.
TEMPLATE_NODE = 7777777
TEMPLATES = 8
_TOKEN = re.compile(rb"node7777777|GPU-7777777|7777777|6222221[6-9]|6222222[0-3]")


def _template(nodes: int, culprit: int, t0: float, seed: int) -> list[bytes | int]:
    """One ordinary node's encoded bundle, cut at each of its node-specific numbers: the literal
    bytes, and between them what goes there (-1 the node's index as in its host name, -2 as a
    number, k >= 0 its k-th local rank)."""
    from hangdoc.analyze.diagnose import node_digest
    from hangdoc.bundle import codec

    bundle = node_bundle(TEMPLATE_NODE, nodes, culprit, t0, seed)
    data = codec.encode(bundle, node_digest(bundle))
    parts: list[bytes | int] = []
    at = 0
    first_rank = TEMPLATE_NODE * RANKS_PER_NODE
    for m in _TOKEN.finditer(data):
        token = m.group(0)
        parts.append(data[at:m.start()])
        if token.startswith(b"node"):
            parts += [b"node", -1]
        elif token.startswith(b"GPU-"):
            parts += [b"GPU-", -1]
        elif token == b"7777777":
            parts.append(-2)
        else:
            parts.append(int(token) - first_rank)
        at = m.end()
    parts.append(data[at:])
    return parts


def _patched(parts: list[bytes | int], node: int) -> bytes:
    names = {-1: f"{node:04d}".encode(), -2: str(node).encode()}
    first = node * RANKS_PER_NODE
    return b"".join(p if isinstance(p, bytes) else names[p] if p < 0 else str(first + p).encode() for p in parts)


def _write_templated(args) -> int:
    from hangdoc.bundle.files import compressed

    folder, nodes, culprit_node, templates, lo, hi = args
    for node in range(lo, hi):
        if node != culprit_node:
            (folder / f"node{node:04d}.json.zst").write_bytes(compressed(_patched(templates[node % len(templates)], node)))
    return hi - lo


def templated_nodes(folder: Path, nodes: int, culprit: int, t0: float, seed: int = 0, jobs: int = 1) -> list[Path]:
    """`nodes` v2 node bundles in `folder`: the culprit's node built whole, every other patched
    from a template (`_template`), written by `jobs` processes."""
    culprit_node = culprit // RANKS_PER_NODE
    templates = [_template(nodes, culprit, t0, seed * TEMPLATES + k) for k in range(min(TEMPLATES, 1 + nodes // 64))]
    save_node(node_bundle(culprit_node, nodes, culprit, t0, seed), folder / f"node{culprit_node:04d}.json.zst")
    step = max(1, nodes // (jobs * 8))
    chunks = [(folder, nodes, culprit_node, templates, lo, min(nodes, lo + step)) for lo in range(0, nodes, step)]
    if jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            sum(pool.imap_unordered(_write_templated, chunks))
    else:
        for chunk in chunks:
            _write_templated(chunk)
    return [folder / f"node{node:04d}.json.zst" for node in range(nodes)]


def culprit_of(ranks: int) -> int:
    return ranks // 2 + 1 if ranks > 2 else 0


_CHILD = r"""
import io, json, sys, time
t = time.perf_counter()
from hangdoc.analyze.assess import analyse
from hangdoc.report import report_of
from hangdoc.base.heap import no_cycle_walks
from hangdoc.bundle.files import bundle_files
from hangdoc.inputs.fold import Shared, diagnose_by_class, read_node
from hangdoc.render.json import report_json
from hangdoc.render.text import render_text
def hwm():
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the parent (a torch-sized bench).
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
base = hwm()
files = bundle_files([sys.argv[1]])
t0, c0 = time.perf_counter(), time.process_time()
shared = Shared()
nodes = [read_node(f, shared) for f in files]
t1, c1 = time.perf_counter(), time.process_time()
loaded = hwm()
with no_cycle_walks():      # as report_from_files folds and judges
    bundle, diagnosis = diagnose_by_class(nodes)
    t2 = time.perf_counter()
    analysis = analyse(bundle, diagnosis=diagnosis)
    t25 = time.perf_counter()
    report = report_of(analysis)
    t3, c3 = time.perf_counter(), time.process_time()
out = io.StringIO()
render_text(report, out, width=160)
t4 = time.perf_counter()
report_json(report)
t5 = time.perf_counter()
print(json.dumps({"load_s": t1 - t0, "classes_s": t2 - t1, "analyse_s": t25 - t2, "rules_s": t3 - t25, "render_s": t4 - t3,
                  "render_json_s": t5 - t4, "cpu_s": c3 - c0, "load_cpu_s": c1 - c0, "peak_rss_bytes": hwm() * 1024,
                  "loaded_rss_bytes": loaded * 1024, "base_rss_bytes": base * 1024, "verdict": report.verdict,
                  "culprits": list(report.culprit_ranks), "report_lines": out.getvalue().count("\n"),
                  "rows": len(report.ranks), "nodes_read_whole": len({p.host for p in bundle.job.ranks})}))
"""


_DECODE_CHILD = r"""
import json, sys, time
from pathlib import Path
from hangdoc.bundle.files import bundle_files, head_of_bytes
files = bundle_files([sys.argv[1]])
blobs = [Path(f).read_bytes() for f in files]
t0, c0 = time.perf_counter(), time.process_time()
for raw, f in zip(blobs, files):
    head_of_bytes(raw, f)
print(json.dumps({"decode_in_memory_s": time.perf_counter() - t0, "decode_in_memory_cpu_s": time.process_time() - c0,
                  "bytes": sum(map(len, blobs))}))
"""


def decode_in_memory(folder: Path) -> dict:
    """The node heads of `folder` decoded from bytes already in memory (read first, not timed), in a
    fresh interpreter: what the read floor (`measure`'s load stage) would be without the files."""
    done = subprocess.run([sys.executable, "-c", _DECODE_CHILD, str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bench child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(folder: Path) -> dict:
    """Load, merge, diagnose and render the bundles in `folder` in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", _CHILD, str(folder)], capture_output=True, text=True,
                          env=dict(os.environ, NO_COLOR="1"))
    if done.returncode != 0:
        raise RuntimeError(f"bench child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def stages_table(rows: list[dict]) -> str:
    """Where a v2 report's time goes, each stage timed in a fresh process (`measure`)."""
    lines = [f"{'ranks':>7} {'digests':>8} {'classes':>8} {'analyse':>8} {'rules':>6} {'text':>6} {'json':>6} "
             f"{'rows':>5} {'nodes read':>10} {'peak RSS':>9} {'in memory':>9} {'report/floor':>12} {'floor/memory':>12}"
             "   (in memory, report/floor, floor/memory: CPU seconds)"]
    for r in rows:
        st = r.get("stages")
        if st:
            lines.append(f"{r['ranks']:>7} {st['load_s']:>7.2f}s {st['classes_s']:>7.2f}s {st['analyse_s']:>7.2f}s "
                         f"{st['rules_s']:>5.2f}s "
                         f"{st['render_s']:>5.2f}s {st['render_json_s']:>5.2f}s {st['rows']:>5} "
                         f"{st['nodes_read_whole']:>10} {st['peak_rss_bytes'] / 2**20:>5.0f} MiB "
                         f"{st['decode_in_memory_cpu_s']:>8.2f}s {r['report_vs_floor']:>11.2f}x {r['floor_vs_memory']:>11.2f}x")
    return "\n".join(lines)


SCALE_SIZES = (1024, 4096, 16384, 65536)
MILLION_SIZES = (131072, 1048576)      # `make bench` section "million"
WRITE_JOBS = min(4, os.cpu_count() or 1)   # processes writing the templated node bundles
V1_UP_TO = 4096                # v1 bundles past this take minutes and gigabytes to write and read
SCALE_TARGETS = {65536: (10.0, 2 << 30), 4096: (1.0, None)}

_REPORT_CHILD = r"""
import atexit, sys
def hwm():
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the parent.
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            sys.stderr.write("\nVmHWM_KiB=" + line.split()[1] + "\n")
atexit.register(hwm)
sys.argv = ["hangdoc", "report", sys.argv[1], "--format", "json"]
from hangdoc.cli import main
sys.exit(main())
"""


def report_run(folder: Path) -> dict:
    """`hangdoc report DIR --format json` in a fresh process: its wall time, VmHWM, verdict, culprits."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", _REPORT_CHILD, str(folder)], stdout=out,
                                 stderr=subprocess.PIPE, env=dict(os.environ, NO_COLOR="1"))
        stderr = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        done = subprocess.CompletedProcess(child.args, child.returncode, None, stderr)
        wall = time.perf_counter() - started
        err = done.stderr.decode(errors="replace")
        if done.returncode not in (0, 3, 4):
            raise RuntimeError(f"hangdoc report failed ({done.returncode}):\n{err[-3000:]}")
        out.seek(0)
        report = json.loads(out.read())
    hwm = int(err.rsplit("VmHWM_KiB=", 1)[1].split()[0])
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "peak_rss_mib": round(hwm / 1024), "verdict": report["verdict"],
            "culprits": report["culprit_ranks"]}


def bench_scale(ranks: int, fmt: str = "v2", seed: int = 0, split: bool = False, folder: Path | None = None) -> dict:
    """One size: write the node bundles (timed apart: write_s), then time `hangdoc report DIR`; with
    `split`, also time its stages (load, merge, diagnose, rules, render) in another fresh process,
    and the heads' decoding from memory in a third. `folder`: where the bundles are (written there
    when it holds none), kept; a temporary directory otherwise."""
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="hangdoc-bench-scale-") as tmp:
            return bench_scale(ranks, fmt, seed, split, Path(tmp))
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    paths = sorted(folder.glob("node*.json*")) or write_bundles(folder, ranks, seed, fmt, jobs=WRITE_JOBS)
    written = time.perf_counter() - started
    size = sum(p.stat().st_size for p in paths)
    row = {"ranks": ranks, "nodes": len(paths), "bytes": size, "format": fmt, "write_s": round(written, 1)}
    row.update(report_run(folder))
    if split:
        row["stages"] = st = measure(folder)
        row["stages"].update(decode_in_memory(folder))
        # The read floor: the node heads read and decoded as the report does (its load stage). As
        # CPU seconds: on a shared machine the wall clock measures the other work as much as this.
        row["report_vs_floor"] = round(row["cpu_s"] / st["load_cpu_s"], 2)
        row["floor_vs_memory"] = round(st["load_cpu_s"] / st["decode_in_memory_cpu_s"], 2)
    return row


def scale_table(rows: list[dict]) -> str:
    lines = [f"{'ranks':>7} {'nodes':>6} {'format':>6} {'bundle bytes':>13} {'written':>8} {'report wall':>11} "
             f"{'peak RSS':>9}  verdict culprits"]
    for r in rows:
        lines.append(f"{r['ranks']:>7} {r['nodes']:>6} {r['format']:>6} {r['bytes']:>13,} {r.get('write_s', 0):>7.1f}s "
                     f"{r['wall_s']:>10.2f}s {r['peak_rss_mib']:>6} MiB  {r['verdict']} {r['culprits']}")
    return "\n".join(lines)


def bench_many_nodes(sizes=SCALE_SIZES, v1_up_to: int = V1_UP_TO) -> list[dict]:
    """The many-node table: every size as v2, and as v1 where v1 can still be run."""
    rows = []
    for ranks in sizes:
        if ranks <= v1_up_to:
            rows.append(bench_scale(ranks, "v1"))
            print(json.dumps(rows[-1]), flush=True)
        row = bench_scale(ranks, "v2", split=True)
        v1 = next((r for r in rows if r["ranks"] == ranks and r["format"] == "v1"), None)
        row["same_as_v1"] = None if v1 is None else (v1["verdict"], v1["culprits"]) == (row["verdict"], row["culprits"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--scale"]:
        # `make bench-scale RANKS=N`: the last line is one JSON object (with --split, its stages too).
        ranks = int(argv[1])
        fmt = argv[argv.index("--format") + 1] if "--format" in argv else "v2"
        split = "--split" in argv
        folder = Path(argv[argv.index("--dir") + 1]) if "--dir" in argv else None
        row = bench_scale(ranks, fmt, split=split, folder=folder)
        if split:
            print(stages_table([row]))
        keys = ("ranks", "nodes", "bytes", "write_s", "wall_s", "cpu_s", "peak_rss_mib", "verdict", "culprits") + (
            ("stages", "report_vs_floor", "floor_vs_memory") if split else ())
        print(json.dumps({k: row[k] for k in keys}))
        return 0
    if argv[:1] == ["--many-nodes"]:
        argv = argv[1:]
    rows = bench_many_nodes(tuple(int(a) for a in argv) or SCALE_SIZES)
    print(scale_table(rows))
    print(stages_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
