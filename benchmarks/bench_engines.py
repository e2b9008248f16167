"""`make bench` section "engines": the CPU one sample's stacks cost, per stack engine.

On a healthy job of 8 ranks x 8 DataLoader workers (a node's shape, 73 processes with the
launcher) and of 2 x 4: CPU seconds (this process and its children, from getrusage) of one
full sample (every process) and of one steady-state sample (ranks every round, the launcher
and the workers every WORKER_EVERY-th round, as the watcher does on a job whose ranks do not
wait on their data), for each engine, the engines alternated round by
round. Engines: py-spy, one `py-spy dump` process per pid in a thread pool (what hangdoc
uses) or one after another; pystack (bloomberg, read in-process through its Python API,
locals included) when it is installed. Also `hangdoc watch --once` wall time on the 2 x 4 job.
"""
from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hangdoc.model import Role

from hangdoc.watcher import WORKER_EVERY   # the watcher's full rounds: launcher and every worker
ONCE_TARGET_S = 0.5
STEADY_TARGET_S = 0.15


def cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class PyStackReader:
    """pystack's `get_process_threads` behind the `PySpy.dump` signature, for measuring only:
    its threads become py-spy-shaped frames (innermost first, locals as name/repr) and go
    through the same parser, so the cost of building the model is counted too."""

    def dump(self, pid: int, native: bool = False, nonblocking: bool = False,
             worker_locals: bool = False, loop_locals: bool = False):
        from pystack.engine import get_process_threads

        from hangdoc.collect.stacks import StackError, parse_dump

        started = time.monotonic()
        try:
            threads = get_process_threads(pid, stop_process=not nonblocking,
                                          locals=worker_locals or loop_locals)
        except Exception as exc:   # pystack raises its own error classes
            raise StackError("failed", f"pystack: {exc}") from None
        data = [{
            "thread_name": "MainThread" if t.tid == pid else "",
            "os_thread_id": t.tid,
            "owns_gil": t.holds_the_gil > 0,
            "frames": [{"name": f.code.scope, "filename": f.code.filename, "line": f.code.location.lineno,
                        "locals": [{"name": k, "repr": v} for k, v in {**f.arguments, **f.locals}.items()]}
                       for f in reversed(list(t.frames))],
        } for t in threads]
        return parse_dump(data, took_s=time.monotonic() - started, loop_locals=loop_locals)


def engines() -> dict:
    from hangdoc.collect.stacks import PySpy, find_py_spy

    found = {"py-spy (pool)": (PySpy(find_py_spy()), None), "py-spy (sequential)": (PySpy(find_py_spy()), 1)}
    try:
        import pystack.engine  # noqa: F401
    except ImportError:
        return found
    found["pystack (in-process)"] = (PyStackReader(), 1)
    return found


def _one(job, reader, parallel, stack_pids, light=frozenset()) -> float:
    from hangdoc.collect.procfs import ProcFS
    from hangdoc.collect.snapshot import Probes, capture

    probes = Probes(procfs=ProcFS(), pyspy=reader, max_parallel=parallel)
    before = cpu_s()
    capture(job, probes, stack_pids=stack_pids, light=light)
    return cpu_s() - before


def bench_shape(nproc: int, workers: int, rounds: int) -> list[dict]:
    from benchmarks.bench import Job
    from hangdoc.collect.discover import find_job
    from hangdoc.collect.procfs import ProcFS

    arms = engines()
    with Job("healthy", nproc=nproc, num_workers=workers) as j:
        job = find_job(j.job.pid, ProcFS())
        ranks = {p.pid for p in job.processes if p.role is Role.RANK}
        worker_pids = {p.pid for p in job.processes if p.role is Role.WORKER}   # read light between full rounds
        full = {name: [] for name in arms}
        light = {name: [] for name in arms}
        for _ in range(rounds):          # alternate the engines so drift hits all of them
            for name, (reader, parallel) in arms.items():
                full[name].append(_one(job, reader, parallel, None))
                light[name].append(_one(job, reader, parallel, ranks, worker_pids))
    rows = []
    base = None
    for name in arms:
        f, r = statistics.median(full[name]), statistics.median(light[name])
        steady = (r * (WORKER_EVERY - 1) + f) / WORKER_EVERY
        base = base or (f, steady)
        rows.append({"shape": f"{nproc} x {workers}", "processes": len(job.processes), "engine": name,
                     "full_cpu_s": round(f, 3), "steady_cpu_s": round(steady, 3),
                     "full_vs_pyspy": round(f / base[0], 2) if base[0] else None,
                     "steady_vs_pyspy": round(steady / base[1], 2) if base[1] else None,
                     "rounds": rounds})
    return rows


def bench_once(runs: int = 5) -> dict:
    """`hangdoc watch PID --once` wall time (a fresh interpreter each run) on a 2 x 4 job."""
    from benchmarks.bench import Job

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
                ["job", "processes", "engine", "full sample", "steady sample", "full / py-spy",
                 "steady / py-spy"],
                [[x["shape"], x["processes"], x["engine"], x["full_cpu_s"], x["steady_cpu_s"],
                  f"{x['full_vs_pyspy']}x", f"{x['steady_vs_pyspy']}x"] for x in r["rows"]]))
    print(f"steady state: ranks every round, launcher and workers every {WORKER_EVERY}th; "
          f"target for 8 x 8: <= {r['steady_target_s']} s")
    o = r["once"]
    print(f"hangdoc watch --once on 2 x 4: {o['wall_s']} s wall, {o['cpu_s']} s CPU "
          f"(median of {o['runs']}; target <= {o['target_s']} s wall)\n")
