"""The headline figures, held against a stored baseline (`make bench`, section "headline").

Five costs a user pays, each measured here the way the user pays it:

- `hangdoc report DIR` over the node bundles of a 65,536- and a 131,072-rank job (8 ranks and 64
  DataLoader workers a node, written as `hangdoc watch` saves them; benchmarks/bench_merge.py):
  wall seconds and peak memory of the whole process;
- a default `hangdoc watch` of a healthy 2-rank x 4-worker job for 40 s, then Ctrl-C: its CPU
  (with its py-spy children) as a share of one core over its wall time;
- `hangdoc watch --once` on that job: CPU seconds, median of 5;
- a steady watch round of that job (the watcher in this process): CPU milliseconds with its
  py-spy children, mean over two whole cycles of 15 rounds, the full round of each counted.

`benchmarks/baseline.json` holds them as measured on one machine (arch, cores, CPU model). Each
figure is compared as a ratio, current / baseline; one more than 25 % worse fails the bench (exit 1)
with a line naming it and by how much. The baseline changes only on purpose, in a commit of its
own that says why (docs/benchmarks.md):

    python -m benchmarks.headline             # measure, compare, exit 1 on a regression
    python -m benchmarks.headline --write     # measure and write benchmarks/baseline.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINE = Path(__file__).with_name("baseline.json")
TOLERANCE = 0.25          # a figure more than this much worse than its baseline fails the bench
WATCH_S = 40.0
SCALES = (65536, 131072)

# name -> (unit, what it is); every figure is lower-is-better
FIGURES = {
    "report_65536_wall_s": ("s", "hangdoc report DIR, 65,536 ranks (8,192 nodes): wall"),
    "report_65536_peak_mib": ("MiB", "hangdoc report DIR, 65,536 ranks: peak RSS"),
    "report_131072_wall_s": ("s", "hangdoc report DIR, 131,072 ranks (16,384 nodes): wall"),
    "report_131072_peak_mib": ("MiB", "hangdoc report DIR, 131,072 ranks: peak RSS"),
    "watch_2x4_core_pct": ("%", "default watch of a healthy 2 x 4 job for 40 s: CPU as % of one core"),
    "watch_once_cpu_s": ("s", "watch --once on that job: CPU, median of 5"),
    "watch_2x4_round_ms": ("ms", "a watch round of that job, steady: CPU with py-spy, mean of two 15-round cycles"),
}


def machine() -> dict:
    """What the figures were measured on: architecture, cores and the CPU's model name."""
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    except OSError:
        pass
    return {"arch": platform.machine(), "cores": os.cpu_count(), "cpu": model}


def _cpu_of(args: list[str], stop_after: float | None = None) -> tuple[float, float]:
    """(CPU seconds of a `hangdoc` process and its children, its wall seconds); Ctrl-C after `stop_after`."""
    started = time.perf_counter()
    # A bench started in the background ignores SIGINT, and its children would inherit that.
    child = subprocess.Popen([sys.executable, "-m", "hangdoc", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=dict(os.environ, NO_COLOR="1"),
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    if stop_after is not None:
        time.sleep(stop_after)
        child.send_signal(signal.SIGINT)
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0          # reaped above
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - started


def compiled() -> None:
    """hangdoc's bytecode, compiled as pip compiles an installed wheel's: with it stale or missing
    (a checkout just edited, PYTHONDONTWRITEBYTECODE set), every start compiles the sources anew
    and every figure of a `hangdoc` process counts that (0.1-0.2 s a start)."""
    import compileall

    import hangdoc

    compileall.compile_dir(str(Path(hangdoc.__file__).parent), quiet=1)


def watch_costs(seconds: float = WATCH_S, once_runs: int = 5) -> dict:
    """The default watch's share of a core over `seconds`, and `watch --once` CPU, on a healthy 2 x 4 job."""
    from benchmarks.common import Job

    with Job("healthy", nproc=2, num_workers=4) as j, tempfile.TemporaryDirectory() as tmp:
        pid = str(j.job.pid)
        cpu, wall = _cpu_of(["watch", pid, "--out", str(Path(tmp) / "w.json.zst")], stop_after=seconds)
        once = [_cpu_of(["watch", pid, "--once", "--out", str(Path(tmp) / f"o{i}.json.zst")])[0]
                for i in range(once_runs)]
        round_ms = _round_cost(j.job.pid)
    return {"watch_2x4_core_pct": round(100 * cpu / wall, 2), "watch_once_cpu_s": round(statistics.median(once), 3),
            "watch_2x4_round_ms": round_ms}


def _round_cost(pid: int, cycles: int = 2, pause_s: float = 0.5) -> float:
    """CPU milliseconds of a watch round, this process and its py-spy children, mean over whole
    cycles of WORKER_EVERY rounds after the first (the full round of each cycle counted): what a
    long watch pays per interval, which the 40 s figure mixes with the start's fixed cost. The
    rounds are section `engines`' (benchmarks/bench_engines.py), with the default engine."""
    from benchmarks.bench_engines import _watch_rounds
    from hangdoc.collect.stacks import PySpy, find_py_spy
    from hangdoc.live.options import WORKER_EVERY

    costs = _watch_rounds(pid, PySpy(find_py_spy()), None, cycles * WORKER_EVERY, pause_s)
    return round(1000 * statistics.fmean(costs), 1)


def report_costs(sizes=SCALES) -> dict:
    from benchmarks.bench_merge import bench_scale

    out = {}
    for ranks in sizes:
        row = bench_scale(ranks)
        out[f"report_{ranks}_wall_s"] = row["wall_s"]
        out[f"report_{ranks}_peak_mib"] = row["peak_rss_mib"]
    return out


def measure() -> dict:
    compiled()
    return {**report_costs(), **watch_costs()}


def compare(current: dict, baseline: dict, tolerance: float = TOLERANCE) -> list[str]:
    """One line per figure more than `tolerance` worse than its baseline (ratios: current / baseline)."""
    worse = []
    for name, (unit, what) in FIGURES.items():
        now, then = current.get(name), baseline["figures"].get(name)
        if now is None or not then:
            continue
        ratio = now / then
        if ratio > 1 + tolerance:
            worse.append(f"{name} ({what}): {now:g} {unit} against {then:g} {unit} in the baseline, "
                         f"{100 * (ratio - 1):.0f} % worse (more than {100 * tolerance:.0f} %)")
    return worse


def table(current: dict, baseline: dict | None) -> str:
    lines = [f"{'figure':<24} {'now':>9} {'baseline':>9} {'ratio':>6}  what"]
    for name, (unit, what) in FIGURES.items():
        now = current.get(name)
        then = baseline["figures"].get(name) if baseline else None
        ratio = f"{now / then:.2f}" if now is not None and then else "-"
        lines.append(f"{name:<24} {now if now is not None else '-':>9} {then if then is not None else '-':>9} "
                     f"{ratio:>6}  {what} ({unit})")
    return "\n".join(lines)


def load_baseline(path: Path = BASELINE) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def check(current: dict, baseline: dict | None) -> tuple[int, list[str]]:
    """(exit code, lines to print): 1 when a figure is more than TOLERANCE worse than the baseline."""
    if baseline is None:
        return 0, [f"no baseline at {BASELINE.name}: nothing compared (python -m benchmarks.headline --write)"]
    lines = []
    here = machine()
    if baseline.get("machine") != here:
        lines.append(f"note: the baseline was measured on {baseline.get('machine')}, this is {here}: "
                     "the ratios compare two machines")
    missing = [name for name in FIGURES if name in current and not baseline["figures"].get(name)]
    if missing:
        lines.append(f"note: not in the baseline, so not compared: {', '.join(missing)} "
                     "(a figure added to the bench is added to the baseline, on purpose: --write)")
    worse = compare(current, baseline)
    lines += [f"REGRESSION {line}" for line in worse]
    if not worse:
        lines.append(f"every figure within {100 * TOLERANCE:.0f} % of the baseline")
    return (1 if worse else 0), lines


def main(argv: list[str] | None = None) -> int:
    from benchmarks.common import ended_by_sigterm

    ended_by_sigterm()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.headline")
    parser.add_argument("--write", action="store_true", help="write the figures as the new baseline")
    parser.add_argument("--why", default="", help="with --write: why the baseline changes (kept in the file)")
    args = parser.parse_args(argv)
    current = measure()
    if args.write:
        BASELINE.write_text(json.dumps({"machine": machine(), "date": time.strftime("%Y-%m-%d"),
                                        "why": args.why, "tolerance": TOLERANCE, "figures": current},
                                       indent=2) + "\n")
        print(table(current, None))
        print(f"written to {BASELINE}; commit it on its own, saying why")
        return 0
    baseline = load_baseline()
    print(table(current, baseline))
    code, lines = check(current, baseline)
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    sys.exit(main())
