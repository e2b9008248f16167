"""The ordinary-jobs matrix: every job x (healthy x3 + every fault) x (watch | run), scored.

    python -m benchmarks.bench_matrix [--quick] [--jobs plain_ddp,...] [--faults kill9,...]
                                      [--modes watch,run,watch-quiet] [--healthy-runs 3] [--fault-rank 1]
                                      [--out DIR] [--resume]

One cell at a time (a 2-core machine runs one 2-rank job well, not two). Prints a row as each
cell ends, then the table, what hangdoc said in every cell it got wrong, and the two figures:
healthy cells with a non-healthy verdict or a critical finding (goal 0), and fault cells with
the right verdict, culprit and rule (goal >= 95 %). Writes DIR/matrix.json (default
bench-results, as `make bench`), rewritten after every cell. The jobs, the injector and the
expectations live in tests/ordinary/ (matrix.py).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchmarks.common import machine, table  # noqa: E402
from ordinary.matrix import (ALL_MODES, FAULT_RANK, FAULTS, JOBS, MODES, CellResult, as_dict,  # noqa: E402
                             run_cell, summarise)

QUICK_FAULTS = ("kill9", "stop", "skip_collective", "poll_lock", "worker_futex", "worker_kill9", "worker_slow",
                "rank_slow")
HEADER = ["job", "fault", "mode", "exit", "verdict", "culprit", "rules", "fault->exit s", "attach->exit s",
          "wall s", "result"]


def plan(jobs: list[str], faults: list[str], modes: list[str], healthy_runs: int,
         quick: bool) -> list[tuple[str, str, str, int]]:
    """The cells, in order: (job, fault, mode, repetition)."""
    cells = []
    for job in jobs:
        for fault in faults:
            if quick and fault != "healthy" and (job != "plain_ddp" or fault not in QUICK_FAULTS):
                continue
            for mode in modes:
                if (quick and fault != "healthy" and mode != "watch") or mode not in FAULTS[fault].modes:
                    continue
                runs = (1 if quick else healthy_runs) if fault == "healthy" else 1
                cells += [(job, fault, mode, rep) for rep in range(runs)]
    return cells


def row(r: dict) -> list:
    seconds = (lambda v: "-" if v is None else f"{v:g}")
    fault = f"{r['fault']} #{r['rep'] + 1}" if r["fault"] == "healthy" else f"{r['fault']}@{r['fault_rank']}"
    return [r["job"], fault, r["mode"],
            "-" if r["exit_code"] is None else r["exit_code"], r["verdict"] or "-",
            ",".join(map(str, r["culprits"])) or "-", ",".join(r["rules"]) or "-",
            seconds(r["fault_to_exit_s"]), seconds(r["attach_to_exit_s"]), seconds(r["wall_s"]),
            r["status"]]


def bench_matrix(jobs: list[str] | None = None, faults: list[str] | None = None, modes: list[str] | None = None,
                 healthy_runs: int = 3, quick: bool = False, interval: float | None = None,
                 out: Path | None = None, rank: int = FAULT_RANK, resume: bool = False, progress=print) -> dict:
    """Run the cells one by one; the results as JSON-ready dicts with the summary. With `resume`,
    the cells already in out/matrix.json are kept and not run again."""
    jobs = jobs or list(JOBS)
    cells = plan(jobs, faults or list(FAULTS), modes or list(MODES), healthy_runs, quick)
    results: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"), "cells": [], "skipped": []}
    if resume and out and (out / "matrix.json").exists():
        results["cells"] = json.loads((out / "matrix.json").read_text())["cells"]
    done = [CellResult(**r) for r in results["cells"]]
    had = {(r.job, r.fault, r.mode, r.rep, r.fault_rank) for r in done}
    for n, (job, fault, mode, rep) in enumerate(cells, 1):
        if (job, fault, mode, rep, None if fault == "healthy" else rank) in had:
            continue
        missing = JOBS[job].missing()
        if missing:
            results["skipped"].append({"job": job, "fault": fault, "mode": mode, "why": f"needs {', '.join(missing)}"})
            continue
        result = run_cell(JOBS[job], FAULTS[fault], mode, rep=rep, rank=rank, interval=interval,
                          keep_bundle=(out / "matrix-bundles") if out else None)
        done.append(result)
        results["cells"].append(as_dict(result))
        results["summary"] = summarise(done)
        progress(f"[{n}/{len(cells)}] " + "  ".join(map(str, row(results["cells"][-1])))
                 + (f"  ({'; '.join(result.why)})" if result.why else ""))
        if out:
            write_json(results, out)
    results["summary"] = summarise(done)
    return results


def print_matrix(results: dict, out=print) -> None:
    rows = [row(r) for r in results["cells"]]
    out(table("Ordinary jobs x faults (tests/ordinary), one cell at a time", HEADER, rows) + "\n")
    wrong = [r for r in results["cells"] if r["status"] != "OK"]
    if wrong:
        out("Cells hangdoc got wrong (MISS) or that could not be judged (INVALID):")
        for r in wrong:
            out(CellResult(**r).describe())
            out("")
    for s in results["skipped"]:
        out(f"skipped {s['job']} / {s['fault']} / {s['mode']}: {s['why']}")
    s = results["summary"]
    out(f"healthy cells with a non-healthy verdict or a critical finding: {s['healthy_wrong']} of "
        f"{s['healthy_cells']} (goal {s['healthy_goal']})")
    out(f"fault cells right (verdict, culprit, rule, cause): {s['fault_right']} of {s['fault_cells']} "
        f"= {s['fault_right_pct']} %; right culprit and rule: {s['fault_culprit_and_rule']} "
        f"= {s['fault_culprit_and_rule_pct']} % (goal >= {s['fault_goal_pct']:g} %); "
        f"invalid cells: {s['invalid']}\n")


def write_json(results: dict, out: Path, name: str = "matrix.json") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(results, indent=2, default=str))
    return path


def parse_names(value: str | None, known: dict, what: str) -> list[str] | None:
    if not value:
        return None
    names = [n for n in value.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_matrix", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="every job healthy once per mode, and a few faults on plain_ddp under watch")
    parser.add_argument("--jobs", help=f"comma-separated, of {', '.join(JOBS)}")
    parser.add_argument("--faults", help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument("--modes", help="watch,run (default both); watch-quiet: watch a job whose output is thrown away")
    parser.add_argument("--healthy-runs", type=int, default=3)
    parser.add_argument("--interval", type=float, help="hangdoc's --interval (default: hangdoc's own)")
    parser.add_argument("--fault-rank", type=int, default=FAULT_RANK, help="the rank the faults strike")
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--resume", action="store_true", help="keep the cells already in OUT/matrix.json; run the rest")
    args = parser.parse_args(argv)
    modes = parse_names(args.modes, dict.fromkeys(ALL_MODES), "modes")
    out = Path(args.out)
    results = bench_matrix(parse_names(args.jobs, JOBS, "jobs"), parse_names(args.faults, FAULTS, "faults"), modes,
                           args.healthy_runs, args.quick, args.interval, out, args.fault_rank, args.resume)
    print()
    print_matrix(results)
    print(f"written to {write_json(results, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
