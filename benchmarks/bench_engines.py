"""`make bench` section "engines": the CPU one sample's stacks cost, per stack engine.

On a healthy job of 8 ranks x 8 DataLoader workers (a node's shape, 73 processes with the
launcher) and of 2 x 4: CPU seconds (this process and its children, from getrusage) of one
full sample (every process, a bare capture) and of a steady-state watch round: the real
watcher's rounds (re-discovery, capture, analysis, the job's own records) averaged over whole
cycles of WORKER_EVERY rounds, so the full round each cycle holds is counted; ranks every
round, the launcher and the workers every WORKER_EVERY-th round, and the workers of a rank
that keeps waiting on its data every round. Engines, alternated: py-spy, one `py-spy dump`
process per pid in a thread pool (hangdoc's default) or one after another; pystack
(bloomberg's, read in-process through its Python API, locals included: hangdoc's fallback,
hangdoc/collect/pystack_engine.py) when it is installed. Also `hangdoc watch --once` wall time
on the 2 x 4 job.
"""
from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hangdoc.live.options import WORKER_EVERY   # the watcher's full rounds: launcher and every worker

ONCE_TARGET_S = 0.5
STEADY_TARGET_S = 0.15


def cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


SLOW = {"pystack (in-process)"}


def engines() -> dict:
    from hangdoc.collect.stacks import PySpy, find_py_spy

    found = {"py-spy (pool)": (PySpy(find_py_spy()), None), "py-spy (sequential)": (PySpy(find_py_spy()), 1)}
    from hangdoc.collect import pystack_engine

    if pystack_engine.available():   # `make bench` installs it (the bench extra)
        found[next(iter(SLOW))] = (pystack_engine.PyStack(), 1)
    return found


def _one(job, reader, parallel, stack_pids) -> float:
    """CPU of one capture of `job` (stacks of `stack_pids`, all when None)."""
    from hangdoc.collect.procfs import ProcFS
    from hangdoc.collect.snapshot import Probes, capture

    probes = Probes(procfs=ProcFS(), pyspy=reader, max_parallel=parallel)
    before = cpu_s()
    capture(job, probes, stack_pids=stack_pids)
    return cpu_s() - before


def _watch_rounds(pid: int, reader, parallel, rounds: int, pause_s: float) -> list[float]:
    """CPU seconds of each of `rounds` real watch rounds (re-discovery, capture, analysis, the
    job's own records), from a fresh watcher's second round on: one cycle of WORKER_EVERY
    rounds holds one full round and the steady ones, as a long watch does."""
    from hangdoc.collect.procfs import ProcFS
    from hangdoc.collect.snapshot import Probes
    from hangdoc.live.options import WatchOptions
    from hangdoc.live.watcher import Watcher

    watcher = Watcher(pid, Probes(procfs=ProcFS(), pyspy=reader, max_parallel=parallel), WatchOptions())
    bundle = watcher.start()
    costs = []
    for i in range(rounds + 1):
        before = cpu_s()
        if i:
            bundle = watcher.step()
        bundle, _ = watcher.judge_round(bundle)
        if i:
            costs.append(cpu_s() - before)
        time.sleep(pause_s)
    return costs


def bench_shape(nproc: int, workers: int, rounds: int, cycles: int = 2, pause_s: float = 0.5) -> list[dict]:
    """Per engine: the full sample (every process, median of `rounds`) and the mean CPU of a
    watch round over `cycles` cycles of WORKER_EVERY rounds, engines alternated cycle by cycle."""
    from benchmarks.common import Job
    from hangdoc.collect.discover import find_job
    from hangdoc.collect.procfs import ProcFS

    arms = engines()
    with Job("healthy", nproc=nproc, num_workers=workers) as j:
        job = find_job(j.job.pid, ProcFS())
        full = {name: [] for name in arms}
        steady = {name: [] for name in arms}
        for _ in range(rounds):          # alternate the engines so drift hits all of them
            for name, (reader, parallel) in arms.items():
                full[name].append(_one(job, reader, parallel, None))
        for cycle in range(cycles):
            for name, (reader, parallel) in arms.items():
                if cycle and name in SLOW:   # one cycle tells a 20x gap; more only lengthens the run
                    continue
                steady[name] += _watch_rounds(j.job.pid, reader, parallel, WORKER_EVERY, pause_s)
    rows = []
    base = None
    for name in arms:
        f, r = statistics.median(full[name]), statistics.fmean(steady[name])
        base = base or (f, r)
        rows.append({"shape": f"{nproc} x {workers}", "processes": len(job.processes), "engine": name,
                     "full_cpu_s": round(f, 3), "steady_cpu_s": round(r, 3),
                     "steady_max_s": round(max(steady[name]), 3),
                     "full_vs_pyspy": round(f / base[0], 2) if base[0] else None,
                     "steady_vs_pyspy": round(r / base[1], 2) if base[1] else None,
                     "rounds": rounds, "watch_rounds": len(steady[name])})
    return rows


def bench_once(runs: int = 5) -> dict:
    """`hangdoc watch PID --once` wall time (a fresh interpreter each run) on a 2 x 4 job."""
    from benchmarks.common import Job

    walls, cpus = [], []
    with Job("healthy", nproc=2, num_workers=4) as j, tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            before, started = cpu_s(), time.perf_counter()
            subprocess.run([sys.executable, "-m", "hangdoc", "watch", str(j.job.pid), "--once", "--no-gpu",
                            "--out", str(Path(tmp) / f"b{i}.json")], capture_output=True, check=False)
            walls.append(time.perf_counter() - started)
            cpus.append(cpu_s() - before)
    return {"wall_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(cpus), 3),
            "runs": runs, "target_s": ONCE_TARGET_S}


def bench_engines(rounds: int = 3) -> dict:
    rows = bench_shape(8, 8, rounds) + bench_shape(2, 4, rounds)
    return {"rows": rows, "once": bench_once(), "steady_target_s": STEADY_TARGET_S}


def print_engines(r: dict, table) -> None:
    print(table("Stack engines: CPU s per sample (this process + children; median of alternated rounds)",
                ["job", "processes", "engine", "full sample", "watch round (mean)", "worst round",
                 "full / py-spy", "steady / py-spy"],
                [[x["shape"], x["processes"], x["engine"], x["full_cpu_s"], x["steady_cpu_s"], x.get("steady_max_s"),
                  f"{x['full_vs_pyspy']}x", f"{x['steady_vs_pyspy']}x"] for x in r["rows"]]))
    print(f"watch round: the real watcher's, mean over cycles of {WORKER_EVERY} rounds (one full); "
          f"target for 8 x 8: <= {r['steady_target_s']} s")
    o = r["once"]
    print(f"hangdoc watch --once on 2 x 4: {o['wall_s']} s wall, {o['cpu_s']} s CPU "
          f"(median of {o['runs']}; target <= {o['target_s']} s wall)\n")
