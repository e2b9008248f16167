"""The loop-style matrix: how a script writes its training loop x what goes wrong, no flag, watched
from the launcher's pid. Never call a moving job hung; name the rank that stalls or crawls.

    python -m benchmarks.bench_loops [--styles main,module,next,lightning,accelerate,hf_trainer]
                                     [--faults healthy,worker_block,rank_3x,nccl_data_stall,nccl_straggler]
                                     [--modes run,watch,watch-early] [--healthy-s 240] [--healthy-runs 3] [--slow-s 60]
                                     [--out DIR]

Healthy cells train for --healthy-s seconds and run --healthy-runs times under `run` (under `watch`
once, when run is not among --modes); every other cell runs once under each mode (watch: attached
once the fault has fired; watch-early: attached at the job's first step, the fault held back 8 s).
A straggler's cells train for --slow-s seconds before the slowing (then about three times as long):
a job that ends a few seconds after a rank slows down leaves too few samples to tell a straggler
from jitter. The NCCL columns
are the style's loop written in NCCL's wait shape (--nccl-shape: collectives return at once, the
sync line spins); Lightning, accelerate and the HF Trainer have none (n/a). One cell at a time.
Prints a row as each cell ends, then the table (verdict, culprit, rules, fault->verdict seconds,
the hang threshold and what it was learned from, OK / MISS), what hangdoc said in each cell it got
wrong, and writes DIR/loops.json (default bench-results), rewritten after every cell. The jobs and
the expectations live in tests/ordinary/matrix.py (LOOP_STYLES, LOOP_FAULTS).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.bench_matrix import parse_names, write_json  # puts tests/ on the path
from benchmarks.common import machine, table
from ordinary.matrix import (ALL_MODES, FAULT_RANK, LOOP_FAULTS, LOOP_STYLES, MODES, CellResult, as_dict, loop_cell,
                             run_cell, summarise)

HEADER = ["style", "fault", "mode", "job", "exit", "verdict", "culprit", "rules", "s to verdict", "threshold",
          "result"]


def plan(styles: list[str], faults: list[str], modes: list[str], healthy_runs: int) -> list[tuple[str, str, str, int]]:
    """The cells, in order: (style, fault column, mode, repetition)."""
    cells = []
    for style in styles:
        for column in faults:
            if column == "healthy":
                cells += [(style, column, "run", rep) for rep in range(healthy_runs)] if "run" in modes else \
                    [(style, column, modes[0], 0)]
            else:
                cells += [(style, column, mode, 0) for mode in modes]
    return cells


def threshold_cell(t: dict | None) -> str:
    """The hang threshold, and what it was learned from."""
    if not t:
        return "-"
    longest = "" if t.get("longest_step_s") is None else f", longest step {t['longest_step_s']:g} s"
    return f"{t['hang_after_s']:g} s {t['source']} ({t['signal']}, {t['steps_seen']} steps{longest})"


def row(r: dict) -> list:
    if r.get("na"):
        return [r["style"], r["column"], "-", "-", "-", "-", "-", "-", "-", "-", "n/a"]
    seconds = r["fault_to_exit_s"] if r["fault_to_exit_s"] is not None else r["attach_to_exit_s"]
    column = f"{r['column']} #{r['rep'] + 1}" if r["column"] == "healthy" else r["column"]
    return [r["style"], column, r["mode"], r["job"], "-" if r["exit_code"] is None else r["exit_code"],
            r["verdict"] or "-", ",".join(map(str, r["culprits"])) or "-", ",".join(r["rules"]) or "-",
            "-" if seconds is None else f"{seconds:g}", threshold_cell(r.get("threshold")), r["status"]]


def bench_loops(styles: list[str] | None = None, faults: list[str] | None = None, modes: list[str] | None = None,
                healthy_s: float = 240.0, healthy_runs: int = 3, interval: float | None = None,
                out: Path | None = None, progress=print, slow_s: float = 60.0) -> dict:
    """Run the cells one by one; the results as JSON-ready dicts (a cell with no job: `na`, why)."""
    styles, faults, modes = styles or list(LOOP_STYLES), faults or list(LOOP_FAULTS), modes or list(MODES)
    results: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"), "healthy_s": healthy_s,
                     "slow_s": slow_s,
                     "cells": [], "skipped": []}
    done: list[CellResult] = []
    for style in styles:
        for column in faults:
            cell = loop_cell(style, column)
            if isinstance(cell, str):
                results["cells"].append({"style": style, "column": column, "na": cell})
    cells = plan(styles, faults, modes, healthy_runs)
    for n, (style, column, mode, rep) in enumerate(cells, 1):
        cell = loop_cell(style, column)
        if isinstance(cell, str):
            continue
        job, fault = cell
        if fault.healthy:
            job = job.lasting(healthy_s)
        elif fault.expect.verdict == "slow" and job.length is not None:
            job = job.lasting(slow_s)
        missing = job.missing()
        if missing:
            results["skipped"].append({"style": style, "column": column, "mode": mode,
                                       "why": f"needs {', '.join(missing)}"})
            continue
        result = run_cell(job, fault, mode, rep=rep, rank=FAULT_RANK, interval=interval,
                          keep_bundle=(out / "loops-bundles") if out else None)
        done.append(result)
        results["cells"].append({"style": style, "column": column, **as_dict(result)})
        results["summary"] = summarise(done)
        progress(f"[{n}/{len(cells)}] " + "  ".join(map(str, row(results["cells"][-1])))
                 + (f"  ({'; '.join(result.why)})" if result.why else ""))
        if out:
            write_json(results, out, "loops.json")
    results["summary"] = summarise(done)
    return results


def print_loops(results: dict, out=print) -> None:
    styles, columns = list(LOOP_STYLES), list(LOOP_FAULTS)
    cells = sorted(results["cells"], key=lambda r: (styles.index(r["style"]), columns.index(r["column"])))
    out(table(f"Loop styles x faults, no flag, watched from the launcher's pid (healthy: "
              f"{results['healthy_s']:g} s)", HEADER, [row(r) for r in cells]) + "\n")
    for reason in sorted({r["na"] for r in cells if r.get("na")}):
        out(f"n/a: {reason}")
    wrong = [r for r in cells if not r.get("na") and r["status"] != "OK"]
    if wrong:
        out("\nCells hangdoc got wrong (MISS) or that could not be judged (INVALID):")
        for r in wrong:
            result = CellResult(**{k: v for k, v in r.items() if k not in ("style", "column")})
            out(f"[{r['style']} x {r['column']}] " + result.describe())
            out("")
    for s in results["skipped"]:
        out(f"skipped {s['style']} / {s['column']} / {s['mode']}: {s['why']}")
    s = results.get("summary")
    if s:
        out(f"healthy cells with a non-healthy verdict or a critical finding: {s['healthy_wrong']} of "
            f"{s['healthy_cells']} (goal {s['healthy_goal']}); fault cells right: {s['fault_right']} of "
            f"{s['fault_cells']} (goal >= {s['fault_goal_pct']:g} %); invalid cells: {s['invalid']}\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_loops", description=__doc__.split("\n")[0])
    parser.add_argument("--styles", help=f"comma-separated, of {', '.join(LOOP_STYLES)}")
    parser.add_argument("--faults", help=f"comma-separated, of {', '.join(LOOP_FAULTS)}")
    parser.add_argument("--modes", help="run,watch (default both); watch-early: a watch attached before the fault")
    parser.add_argument("--healthy-s", type=float, default=240.0, help="how long a healthy cell trains, seconds")
    parser.add_argument("--healthy-runs", type=int, default=3, help="healthy cells under run, each style")
    parser.add_argument("--slow-s", type=float, default=60.0,
                        help="how long a straggler's cell trains before the slowing, seconds")
    parser.add_argument("--interval", type=float, help="hangdoc's --interval (default: hangdoc's own)")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    out = Path(args.out)
    results = bench_loops(parse_names(args.styles, LOOP_STYLES, "styles"),
                          parse_names(args.faults, LOOP_FAULTS, "faults"),
                          parse_names(args.modes, dict.fromkeys(ALL_MODES), "modes"),
                          args.healthy_s, args.healthy_runs, args.interval, out, slow_s=args.slow_s)
    print()
    print_loops(results)
    print(f"written to {write_json(results, out, 'loops.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
