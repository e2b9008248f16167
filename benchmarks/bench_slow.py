"""`make bench` section "slow": the slow verdict on the zoo.

    python -m benchmarks.bench_slow [--runs 3] [--only SCENARIO ...]

- every slow scenario under `hangdoc run` (no flag): the verdict, the straggler and the rule,
  the speed-up hangdoc estimates (an upper bound) next to the one measured (the same job
  without its fault: compute-2x --balanced, tiny-files with no latency on its opens,
  bz2-straggler with its shards re-packed as plain .tar), and the seconds from the
  start of the watch to the first SLOW;
- balanced healthy scenarios (ranks taking turns, pauses in a barrier, fast steps), `runs`
  times each: the goal is 0 slow verdicts.
"""
from __future__ import annotations

import argparse
import bz2
import re
import shutil
import tempfile
import time
from pathlib import Path

from hangdoc.scenarios import SCENARIOS
from hangdoc.scenarios.launch import start_job, stop_job

INTERVAL_S = 1.0
BALANCED = ("jitter", "healthy", "sync-line", "validation-pause", "checkpoint-pause")
_DONE = re.compile(r"done after (\d+) steps \(([\d.]+) s\)")


def _repack(listing: Path) -> None:
    """The fix slow-decompression gives: every .tar.bz2 of the list re-packed as a plain .tar."""
    shards = []
    for line in listing.read_text().split():
        if line.endswith(".tar.bz2"):
            plain = Path(line[:-len(".bz2")])
            with bz2.open(line) as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst)
            line = str(plain)
        shards.append(line)
    listing.write_text("".join(f"{s}\n" for s in shards))


# The same job without its fault, the yardstick of the measured speed-up: extra arguments, or
# the data re-packed.
YARDSTICKS = {"compute-2x": ("--balanced",), "tiny-files": ("--open-latency", "0"), "bz2-straggler": "repack"}


def _bare_seconds(name: str, extra: tuple[str, ...] | str = ()) -> float | None:
    """How long the scenario's ranks take, run alone (no hangdoc): the slowest rank's own figure."""
    scenario = SCENARIOS[name]
    with tempfile.TemporaryDirectory(prefix=f"hangdoc-slow-{name}-") as tmp:
        work = Path(tmp)
        listing = scenario.prepare(work)
        if extra == "repack":
            _repack(listing)
            extra = ()
        job = start_job(scenario.command(work) + list(extra), log_path=work / "job.log")
        try:
            job.popen.wait(timeout=600)
        finally:
            stop_job(job)
        times = [float(m.group(2)) for m in _DONE.finditer((work / "job.log").read_text(errors="replace"))]
    return max(times) if times else None


def bench_slow(runs: int = 3, progress=print, only: tuple[str, ...] = ()) -> dict:
    from hangdoc.scenarios.evaluate import evaluate

    rows = []
    for scenario in (s for s in SCENARIOS.values() if s.verdict == "slow" and (not only or s.name in only)):
        first_slow: list[float] = []
        started = time.monotonic()

        def seen(report, mark=first_slow, t0=started):
            if report.verdict == "slow" and not mark:
                mark.append(round(time.monotonic() - t0, 1))

        result = evaluate(scenario, hang_after=None, interval=INTERVAL_S, timeout=300.0, on_sample=seen)
        slow = result.report.slow
        measured = None
        if scenario.name in YARDSTICKS:
            slow_s, balanced_s = _bare_seconds(scenario.name), _bare_seconds(scenario.name, YARDSTICKS[scenario.name])
            measured = round(slow_s / balanced_s, 2) if slow_s and balanced_s else None
        rows.append({"scenario": scenario.name, "verdict": result.verdict, "stragglers": list(result.culprits),
                     "right": result.localised, "rules": list(result.rules),
                     "kind": slow.kind if slow else None,
                     "others_wait": slow.others_wait if slow else None,
                     "speedup_estimate": slow.speedup_at_most if slow else None, "speedup_measured": measured,
                     "first_slow_s": first_slow[0] if first_slow else None})
        progress(f"  {rows[-1]}")
    balanced = []
    for name in (n for n in BALANCED if not only or n in only):
        for _ in range(runs):
            result = evaluate(SCENARIOS[name], hang_after=None, interval=INTERVAL_S, timeout=300.0)
            balanced.append({"scenario": name, "verdict": result.verdict})
            progress(f"  {name}: {result.verdict}")
    return {"rows": rows, "balanced": balanced, "interval_s": INTERVAL_S,
            "slow_verdicts_on_balanced": sum(b["verdict"] == "slow" for b in balanced),
            "goal": "slow scenarios: slow, the right straggler and rule; balanced ones: 0 slow verdicts"}


def print_slow(r: dict, table) -> None:
    print(table(f"Slow: the zoo's slow scenarios under hangdoc run (interval {r['interval_s']:g} s, no flag)",
                ["scenario", "verdict", "stragglers", "right", "rules", "kind", "others wait",
                 "speed-up estimated (<=)", "speed-up measured", "watch start -> SLOW s"],
                [[x["scenario"], x["verdict"], x["stragglers"], "yes" if x["right"] else "NO", ",".join(x["rules"]),
                  x["kind"] or "-", x["others_wait"] if x["others_wait"] is not None else "-",
                  x["speedup_estimate"] or "-", x["speedup_measured"] or "-", x["first_slow_s"] or "-"]
                 for x in r["rows"]]))
    counts: dict[str, list[str]] = {}
    for b in r["balanced"]:
        counts.setdefault(b["scenario"], []).append(str(b["verdict"]))
    print(table("Balanced healthy scenarios: never slow",
                ["scenario", "runs", "verdicts"], [[k, len(v), " ".join(v)] for k, v in counts.items()]))
    print(f"slow verdicts on balanced jobs: {r['slow_verdicts_on_balanced']} (goal: {r['goal']})\n")


def main(argv=None) -> int:
    from benchmarks.common import machine, table, write_results

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_slow")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--only", nargs="+", default=(), metavar="SCENARIO", help="these scenarios only")
    args = parser.parse_args(argv)
    results = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"),
               "slow": bench_slow(args.runs, only=tuple(args.only))}
    print_slow(results["slow"], table)
    write_results(results, args.out, "slow")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
