"""`make bench`: the speed, overhead and accuracy figures, as tables and as JSON.

    python -m benchmarks.bench [--only headline,snapshot,latency,engines,watch-cost,overhead,zoo,check,merge,million,matrix,loops,late,slow,fuzz,diverge,proofs,starts] [--out DIR]

`headline` measures the figures benchmarks/baseline.json holds (report DIR at 65,536 and 131,072
ranks, the default watch's share of a core, `watch --once` CPU, a steady watch round) and compares them as ratios: one
more than 25 % worse than its baseline ends the bench with exit 1, naming it (benchmarks/headline.py).

`matrix` runs the quick ordinary-jobs matrix; the whole of it: python -m benchmarks.bench_matrix.
`loops` runs the loop-style matrix with one 60 s healthy run a style; the whole of it (three 240 s
healthy runs a style): python -m benchmarks.bench_loops.
`diverge` runs the divergence matrix (ranks that part ways in their own code) under watch and run.
`late` attaches to the zoo's hung jobs 5, 30 and 120 s after the fault, and to healthy ones at random;
`slow` scores the slow verdict (stragglers, speed-up estimated against measured, 0 on balanced jobs).
`proofs` times each proven hang from its fault to the verdict under `watch` from the start and under
`run`, beside the verdict on its look-alike (benchmarks/bench_proofs.py).
`starts` runs each shape of benchmarks/bench_starts.py (restarts that recover or hang, bz2 seeks and
rewinds, wrapped ranks, a reused pid) once under watch and once under run; the whole of it (three runs
of each): python -m benchmarks.bench_starts.
`watch-cost` is the default watch of a 2 x 4 job over a steady minute (% of a core, user and system
time apart) and where a round's CPU goes (benchmarks/bench_watch_cost.py); `million` is `report DIR`
at 131,072 and 1,048,576 ranks against its read floor, the heads decoded from memory, and memory.
`fuzz` feeds `hangdoc report` Hypothesis-made and crafted bundles, digests and FR dumps under 1 GiB.

Every figure comes from real torchrun jobs on this machine; ratios are measured within one
run (alternating the two arms) because a shared machine is noisy. Absolute times are
printed with the machine they were taken on.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import Job, ended_by_sigterm, machine, table
from hangdoc.scenarios import SCENARIOS
from hangdoc.scenarios.launch import start_job, stop_job, wait_for

SECTIONS = ("headline", "snapshot", "locals", "latency", "engines", "watch-cost", "analysis", "overhead", "false-alarms",
            "detection", "zoo", "check", "merge", "million", "matrix", "loops", "late", "slow", "fuzz", "diverge", "proofs", "starts")


def _median_capture(pid: int, parallel: int | None, runs: int) -> tuple[float, int]:
    from hangdoc.collect.discover import find_job
    from hangdoc.collect.snapshot import capture
    from hangdoc.live.options import WatchOptions
    from hangdoc.live.probes import make_probes

    probes = make_probes(WatchOptions(gpu=False))
    probes.max_parallel = parallel
    times, count = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        job = find_job(pid, probes.procfs)
        capture(job, probes)
        times.append(time.perf_counter() - started)
        count = len(job.processes)
    return statistics.median(times), count


def bench_snapshot(runs: int = 9) -> list[dict]:
    """Whole snapshot (discovery + /proc + py-spy stacks) of 2 ranks x 4 workers, parallel vs
    sequential py-spy: on a hung job (mostly idle processes) and on one training flat out."""
    out = []
    for label, name in (("hung (worker-deadlock)", "worker-deadlock"), ("training (healthy)", "healthy")):
        with Job(name, num_workers=4) as j:
            if name != "healthy":
                wait_for(j.scenario.fault_marker(j.work), j.job, timeout=60)
                time.sleep(1.0)
            par, seq = [], []
            for _ in range(runs):        # alternate the arms so drift hits both
                par.append(_median_capture(j.job.pid, None, 1)[0])
                seq.append(_median_capture(j.job.pid, 1, 1)[0])
            _, procs = _median_capture(j.job.pid, None, 1)
        p, s = statistics.median(par), statistics.median(seq)
        out.append({"job": label, "processes": procs, "parallel_s": round(p, 3), "sequential_s": round(s, 3),
                    "speedup": round(s / p, 2), "runs": runs, "goal": "<= 0.5 s and >= 1.8x"})
    return out


def bench_latency(runs: int = 5) -> list[dict]:
    """Snapshot latency as the job grows: one rank with 1, 4, 10, 22 workers -> 3, 6, 12, 24 processes."""
    out = []
    for workers in (1, 4, 10, 22):
        with Job("healthy", nproc=1, num_workers=workers) as j:
            median, procs = _median_capture(j.job.pid, None, runs)
        out.append({"processes": procs, "median_s": round(median, 3), "per_process_ms": round(median / procs * 1000, 1)})
    return out


_STEP = re.compile(r"\[rank 0\] step (\d+) loss \S+ t=([\d.]+)s")


def _steps_per_s(log: Path) -> float:
    points = [(int(m.group(1)), float(m.group(2))) for m in _STEP.finditer(log.read_text(errors="replace"))]
    if len(points) < 3:
        return 0.0
    (s0, t0), (s1, t1) = points[1], points[-1]
    return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0


def _one_overhead_run(watched: bool, steps: int, interval: float) -> float:
    from hangdoc.live.options import WatchOptions
    from hangdoc.live.probes import make_probes
    from hangdoc.live.watcher import Watcher

    scenario = SCENARIOS["healthy"]
    with tempfile.TemporaryDirectory(prefix="hangdoc-bench-") as tmp:
        work = Path(tmp)
        scenario.prepare(work)
        job = start_job(scenario.command(work, max_steps=steps), log_path=work / "job.log")
        try:
            wait_for(scenario.ready_markers(work), job, timeout=90)
            if watched:
                watcher = Watcher(job.pid, make_probes(WatchOptions()), WatchOptions(interval_s=interval))
                thread = threading.Thread(target=lambda: watcher.run(ended=lambda: job.popen.poll() is not None),
                                          daemon=True)
                thread.start()
            job.popen.wait(timeout=600)
            if watched:
                thread.join(timeout=30)
        finally:
            stop_job(job)
        return _steps_per_s(work / "job.log")


def bench_overhead(pairs: int = 5, steps: int = 1500, interval: float | None = None) -> dict:
    """Steps/s of the healthy job with and without `hangdoc watch` at the default interval."""
    from hangdoc.base.defaults import INTERVAL_S as DEFAULT_INTERVAL_S

    interval = interval or DEFAULT_INTERVAL_S
    bare, watched = [], []
    for _ in range(pairs):
        bare.append(_one_overhead_run(False, steps, interval))
        watched.append(_one_overhead_run(True, steps, interval))
    b, w = statistics.median(bare), statistics.median(watched)
    return {"interval_s": interval, "steps_per_s_bare": round(b, 1), "steps_per_s_watched": round(w, 1),
            "ratio_pct": round(100 * w / b, 1) if b else None, "pairs": pairs, "goal": ">= 99 %",
            "bare_runs": [round(x, 1) for x in bare], "watched_runs": [round(x, 1) for x in watched]}


def bench_zoo(hang_after: float | None = 10.0) -> dict:
    """Every scenario under `hangdoc run`: verdict, culprits, rule, time from fault to verdict."""
    from hangdoc.scenarios.evaluate import evaluate

    rows = []
    for scenario in SCENARIOS.values():
        result = evaluate(scenario, hang_after=hang_after, interval=1.0, timeout=240.0)
        rows.append({"scenario": scenario.name, "expected": f"{result.expected_verdict} {list(result.expected_culprits)} {result.expected_rule or '-'}",
                     "got": f"{result.verdict} {list(result.culprits)} {','.join(r for r in result.rules if r == result.expected_rule) or (result.rules[0] if result.rules else '-')}",
                     "right": result.localised, "false_alarm": result.false_alarm,
                     "seconds_to_verdict": result.seconds_to_verdict, "wall_s": result.wall_s,
                     "rules": list(result.rules)})
    faults = [r["seconds_to_verdict"] for r in rows if r["seconds_to_verdict"] is not None]
    return {"hang_after_s": hang_after, "rows": rows,
            "accuracy_pct": round(100 * sum(r["right"] for r in rows) / len(rows), 1),
            "false_alarms": sum(r["false_alarm"] for r in rows),
            "median_s_to_verdict": statistics.median(faults) if faults else None,
            "worst_s_to_verdict": max(faults) if faults else None,
            "goal": "100 % right, 0 false alarms, every diagnosis <= 15 s after the fault marker"}


def main(argv=None) -> int:
    ended_by_sigterm()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench")
    parser.add_argument("--only", default=",".join(SECTIONS))
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    wanted = [s for s in args.only.split(",") if s]
    results: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M")}
    print(f"hangdoc bench on {results['machine']}\n")
    code = 0
    if "headline" in wanted:
        from benchmarks import headline

        figures = results["headline"] = headline.measure()
        baseline = headline.load_baseline()
        code, lines = headline.check(figures, baseline)
        print("The headline figures against benchmarks/baseline.json (ratios: now / baseline)")
        print(headline.table(figures, baseline))
        print("\n".join(lines) + "\n")
    if "fuzz" in wanted:
        from benchmarks.bench_fuzz import bench_fuzz

        r = results["fuzz"] = bench_fuzz()
        print(table(f"Fuzz of report's inputs (seed {r['seed']}, {r['examples_per_strategy']} per strategy, "
                    "1 GiB address space, 20 s an input)",
                    ["inputs tried", "peak RSS MB", "slowest s", "slowest input", "wall s", "failures"],
                    [[r["inputs"], r["peak_rss_mb"], r["slowest_s"], r["slowest"], r["seconds"], len(r["failures"])]]))
        for line in r["failures"][:5]:
            print(f"  {line.splitlines()[-1] if line else line}")
        print()
    if "snapshot" in wanted:
        rows = results["snapshot"] = bench_snapshot()
        print(table("Snapshot of a 2-rank x 4-worker job (median of alternated runs)",
                    ["job", "processes", "parallel s", "sequential s", "speedup", "goal"],
                    [[r["job"], r["processes"], r["parallel_s"], r["sequential_s"], f"{r['speedup']}x", r["goal"]]
                     for r in rows]) + "\n")
    if "latency" in wanted:
        rows = results["latency"] = bench_latency()
        print(table("Snapshot latency per sample as the job grows",
                    ["processes", "median s", "ms / process"],
                    [[r["processes"], r["median_s"], r["per_process_ms"]] for r in rows]) + "\n")
    if "engines" in wanted:
        from benchmarks.bench_engines import bench_engines, print_engines

        print_engines(results.setdefault("engines", bench_engines()), table)
    if "watch-cost" in wanted:
        from benchmarks.bench_watch_cost import bench_watch_cost, print_watch_cost

        print_watch_cost(results.setdefault("watch_cost", bench_watch_cost()), table)
    if "analysis" in wanted:
        from benchmarks.bench_analysis import TARGET_MS, bench_analysis

        rows = results["analysis"] = bench_analysis()
        print(table("The watch's analysis per round as its history grows (8 ranks x 8 workers, one rank "
                    "waiting on data): timelines kept round to round vs rebuilt",
                    ["samples", "kept ms", "rebuilt ms", "verdict", "goal"],
                    [[r["samples"], r["kept_ms"], r["rebuilt_ms"], r["verdict"], f"<= {TARGET_MS:.0f} ms at 600"]
                     for r in rows]) + "\n")
    if "locals" in wanted:
        from benchmarks.bench_rhythm import bench_locals

        r = results["locals"] = bench_locals()
        print(table(f"One capture of {r['job']}, with and without --locals (median of {r['runs']} alternated)",
                    ["wall s without", "wall s with", "CPU s without", "CPU s with", "CPU with / without"],
                    [[r["wall_s_without"], r["wall_s_with"], r["cpu_s_without"], r["cpu_s_with"],
                      f"{r['cpu_ratio']}x"]]) + "\n")
    if "false-alarms" in wanted:
        from benchmarks.bench_rhythm import bench_false_alarms

        r = results["false_alarms"] = bench_false_alarms()
        print(table("False alarms: healthy scenarios under hangdoc run, no --hang-after (learned threshold)",
                    ["scenario", "runs", "hang verdicts", "verdicts", "largest threshold s"],
                    [[x["scenario"], x["runs"], x["hang_verdicts"], " ".join(x["verdicts"]), x["threshold_s"]]
                     for x in r["rows"]]))
        print(f"hang verdicts in all: {r['hang_verdicts']} (goal: {r['goal']})\n")
    if "detection" in wanted:
        from benchmarks.bench_rhythm import bench_detection

        r = results["detection"] = bench_detection()
        print(table(f"Detection with no --hang-after (interval {r['interval_s']:g} s)",
                    ["scenario", "verdict", "culprits", "right", "threshold from", "learned step s",
                     "threshold s", "fault -> verdict s", "target s", "met"],
                    [[x["scenario"], x["verdict"], x["culprits"], "yes" if x["right"] else "NO", x["source"],
                      x["learned_step_s"] if x["learned_step_s"] is not None else "-", x["threshold_s"],
                      x["seconds_to_verdict"], x["target_s"] if x["target_s"] is not None else "-",
                      "yes" if x["met"] else "no"] for x in r["rows"]]))
        print(f"goal: {r['goal']}\n")
    if "overhead" in wanted:
        r = results["overhead"] = bench_overhead()
        print(table(f"Training overhead of hangdoc watch at --interval {r['interval_s']:g} (healthy job, alternated)",
                    ["steps/s bare", "steps/s watched", "watched / bare", "goal", "runs bare", "runs watched"],
                    [[r["steps_per_s_bare"], r["steps_per_s_watched"], f"{r['ratio_pct']} %", r["goal"],
                      r["bare_runs"], r["watched_runs"]]]) + "\n")
    if "zoo" in wanted:
        r = results["zoo"] = bench_zoo()
        print(table(f"Scenario zoo at --hang-after {r['hang_after_s']:g} (hangdoc run)",
                    ["scenario", "expected", "got", "right", "fault -> verdict s", "wall s"],
                    [[x["scenario"], x["expected"], x["got"], "yes" if x["right"] else "NO",
                      x["seconds_to_verdict"] if x["seconds_to_verdict"] is not None else "-", x["wall_s"]]
                     for x in r["rows"]]))
        print(f"localisation accuracy {r['accuracy_pct']} %, false alarms {r['false_alarms']}, "
              f"median {r['median_s_to_verdict']} s, worst {r['worst_s_to_verdict']} s to diagnosis "
              f"(goal: {r['goal']})\n")
    if "check" in wanted:
        from benchmarks.bench_check import bench_check

        r = results["check"] = bench_check()
        rates = ", ".join(f"{kind} {v['mb_per_s']} MB/s" for kind, v in r["throughput"].items())
        print(table("hangdoc check data on a list of 1,000 shards",
                    ["shards", "metadata pass s", "goal", "sampled pass s", "sampled throughput"],
                    [[r["n_shards"], r["metadata_s"], f"<= {r['metadata_target_s']} s", r["sample_s"], rates]]) + "\n")
    if "merge" in wanted:
        from benchmarks.bench_merge import bench_many_nodes, stages_table

        rows = results["many_nodes"] = bench_many_nodes()
        print(table("`hangdoc report DIR` in a fresh process, v1 (JSON) vs v2 (interned, zstd, digested) node bundles",
                    ["ranks", "nodes", "format", "bundle bytes", "report wall s", "peak RSS MiB", "verdict",
                     "culprits", "same as v1", "goal"],
                    [[r["ranks"], r["nodes"], r["format"], f"{r['bytes']:,}", r["wall_s"], r["peak_rss_mib"],
                      r["verdict"], r["culprits"], {True: "yes", False: "NO"}.get(r.get("same_as_v1"), "-"),
                      "<= 10 s, <= 2 GiB at 65536; <= 1 s at 4096"]
                     for r in rows]) + "\n")
        print(stages_table(rows) + "\n")
    if "million" in wanted:
        from benchmarks.bench_merge import MILLION_SIZES, bench_scale, scale_table, stages_table

        rows = results["million"] = [bench_scale(ranks, split=True) for ranks in MILLION_SIZES]
        print("`hangdoc report DIR` at 131,072 and 1,048,576 ranks (templated node bundles; goal: within 2x "
              "its read floor and 4 GiB, the floor within 3x of decoding the heads in memory)")
        print(scale_table(rows))
        print(stages_table(rows) + "\n")
    if "matrix" in wanted:
        from benchmarks.bench_matrix import bench_matrix, print_matrix

        print_matrix(results.setdefault("matrix", bench_matrix(quick=True)))
    if "loops" in wanted:
        from benchmarks.bench_loops import bench_loops, print_loops

        print_loops(results.setdefault("loops", bench_loops(healthy_s=60, healthy_runs=1)))
    if "slow" in wanted:
        from benchmarks.bench_slow import bench_slow, print_slow

        print_slow(results.setdefault("slow", bench_slow()), table)
    if "late" in wanted:
        from benchmarks.bench_late import bench_late, print_late

        print_late(results.setdefault("late", bench_late()), table)
    if "diverge" in wanted:
        from benchmarks.bench_diverge import bench_diverge, MODES

        results.setdefault("diverge", bench_diverge(list(MODES)))
    if "proofs" in wanted:
        from benchmarks.bench_proofs import bench_proofs, print_proofs

        print_proofs(results.setdefault("proofs", bench_proofs()))
    if "starts" in wanted:
        from benchmarks.bench_starts import SHAPES, bench_starts, print_starts

        print_starts(results.setdefault("starts", bench_starts(list(SHAPES), ["watch", "run"], 1, Path(args.out))))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"written to {path}")
    if code:
        print("make bench: a headline figure is more than 25 % worse than benchmarks/baseline.json (above)")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
