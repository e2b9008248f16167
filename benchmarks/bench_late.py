"""`make bench` section "late": attach to a job that is already hung, or at a random moment of a healthy one.

    python -m benchmarks.bench_late [--delays 5,30,120] [--healthy-runs 3] [--scenarios a,b] [--out DIR]

- every hang scenario of the zoo, attached 5, 30 and 120 s after its fault, with no flag: what
  the report knew of the past (the wait already under way), verdict and culprit, attach -> verdict;
  target <= 15 s where every rank outside the wait is asleep (gloo);
- every healthy scenario attached at a random moment, `healthy_runs` times, watched for 40 s:
  the goal is 0 hang verdicts.
"""
from __future__ import annotations

import argparse
import random
import time

from hangdoc.scenarios import SCENARIOS
from hangdoc.scenarios.late import attach_late

DELAYS = (5.0, 30.0, 120.0)
TARGET_S = 15.0
HEALTHY_WATCH_S = 40.0


def bench_late(delays=DELAYS, healthy_runs: int = 3, names: list[str] | None = None, progress=print) -> dict:
    chosen = [s for s in SCENARIOS.values() if names is None or s.name in names]
    rows, healthy = [], []
    for scenario in (s for s in chosen if s.verdict == "hang"):
        for delay in delays:
            r = attach_late(scenario, delay, timeout_s=150.0)
            row = {"scenario": r.scenario, "delay_s": delay, "attached_after_s": r.attached_after_s,
                   "verdict": r.verdict, "culprits": list(r.culprits), "right": r.right, "rules": list(r.rules),
                   "waited_before_s": r.waited_before_s, "from_past": r.decided_from_past,
                   "attach_to_verdict_s": r.attach_to_verdict_s, "met": r.right and r.attach_to_verdict_s <= TARGET_S,
                   "why": r.why}
            rows.append(row)
            progress(f"  {row['scenario']} +{delay:g}s: {row['verdict']} {row['culprits']} in "
                     f"{row['attach_to_verdict_s']} s (past {row['waited_before_s']} s)")
    rng = random.Random(22)
    for scenario in (s for s in chosen if s.verdict in ("healthy", "slow")):   # never a hang
        for _ in range(healthy_runs):
            delay = round(rng.uniform(2.0, 45.0), 1)
            r = attach_late(scenario, delay, timeout_s=HEALTHY_WATCH_S)
            healthy.append({"scenario": r.scenario, "delay_s": delay, "verdict": r.verdict,
                            "waited_before_s": r.waited_before_s, "why": r.why})
            progress(f"  {scenario.name} +{delay:g}s: {r.verdict}")
    return {"rows": rows, "healthy": healthy, "target_s": TARGET_S,
            "hang_verdicts_on_healthy": sum(h["verdict"] == "hang" for h in healthy),
            "goal": f"right, <= {TARGET_S:g} s from attach where every rank outside the wait is asleep; "
                    "0 hang verdicts on healthy jobs"}


def print_late(r: dict, table) -> None:
    print(table("Attached late: hang scenarios watched N s after the fault, no flag",
                ["scenario", "attached after s", "knew of the past s", "verdict", "culprits", "right",
                 "from the past", "attach -> verdict s", f"<= {r['target_s']:g} s"],
                [[x["scenario"], x["attached_after_s"], x["waited_before_s"] if x["waited_before_s"] is not None else "-",
                  x["verdict"], x["culprits"], "yes" if x["right"] else "NO", "yes" if x["from_past"] else "no",
                  x["attach_to_verdict_s"], "yes" if x["met"] else "no"] for x in r["rows"]]))
    print(table(f"Healthy scenarios attached at a random moment, watched {HEALTHY_WATCH_S:g} s",
                ["scenario", "attached after ready s", "verdict", "knew of the past s"],
                [[x["scenario"], x["delay_s"], x["verdict"], x["waited_before_s"] if x["waited_before_s"] is not None
                  else "-"] for x in r["healthy"]]))
    print(f"hang verdicts on healthy jobs: {r['hang_verdicts_on_healthy']} (goal: {r['goal']})\n")


def main(argv=None) -> int:
    from benchmarks.common import machine, table, write_results

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_late")
    parser.add_argument("--delays", default=",".join(f"{d:g}" for d in DELAYS))
    parser.add_argument("--healthy-runs", type=int, default=3)
    parser.add_argument("--scenarios", help="names, comma-separated (default: the whole zoo)")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n] if args.scenarios else None
    unknown = [n for n in names or () if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}: one of {', '.join(SCENARIOS)}")
    results = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"),
               "late": bench_late([float(d) for d in args.delays.split(",")], args.healthy_runs, names)}
    print_late(results["late"], table)
    write_results(results, args.out, "late")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
