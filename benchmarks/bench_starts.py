"""Never a false hang, the starts and ends of jobs: each shape where a verdict could flip, under
`hangdoc watch` from the launcher's pid (attached as the job starts) and under `hangdoc run`, no
flag, `runs` times each, every one recorded (`--record`) so a flip can be replayed.

    python -m benchmarks.bench_starts [--shapes restart,restart-loaded,...] [--modes watch,run]
                                      [--runs 3] [--out DIR]

The shapes, each a real job (tests/jobs/leave_job.py, tests/jobs/stall_job.py, the zoo's train.py):

- restart: torchrun --max-restarts=2 (c10d rendezvous, --standalone) whose rank 1 raises a transient
  error once, at step 20; the restart runs to its end: healthy.
- restart-loaded: the same on a loaded machine: two busy loops (one a core) for the whole job, and
  the restarted ranks load their model for 12 s before init_process_group: healthy.
- restart-hang: the restart's rank 1 waits in init_process_group on an address of its own, the others
  on the launcher's store: a hang, rank 1, what the ranks wait for said (missing-ranks).
- bz2-seeks: the zoo's bz2-shards, rank 1's workers reading .tar.bz2 shards by random access (a
  backward seek decompresses from the file's start), one batch longer than 60 s: slow, rank 1, with
  the estimate of its next batch.
- rewind: the zoo's train.py in bz2-rewind: a rank-1 worker reads one record of a .tar.bz2 shard
  again for ever (a stale CRC index), each retry a backward seek to the same place: a hang, rank 1.
- wrap-chains, wrap-numactl: `torchrun --no-python wrap.sh` whose ranks run stall_job.py under
  `bash -c`, `env ... timeout ... taskset` (chains) or `numactl` (where installed); rank 1's
  DataLoader worker decompresses in memory for ever: a hang, rank 1, the ranks read below their wrappers.
- reused-pid: in a pid namespace of its own (`unshare -p -f --mount-proc`, as root), rank 1 leaves
  (exits 0) while rank 0 writes a checkpoint, and a stranger process is given its pid at once;
  rank 0 then fails in its barrier: a crash, rank 1 (its exit read), the stranger ignored.

Each cell's job, and hangdoc, run in a session of their own and are ended by pid when the cell
ends, pass or fail. The fault's time is the job's own marker (WORKDIR/fault), or the bench's where
it makes the fault; a healthy cell counts from the job's start. The verdict's time is the decision
of the bundle hangdoc saved.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.common import ended_by_sigterm, machine, table, write_results
from hangdoc.live.proc import RunningJob, start_job, stop_job
from hangdoc.scenarios import SCENARIOS
from hangdoc.scenarios.launch import torchrun_cmd

JOBS = Path(__file__).resolve().parents[1] / "tests" / "jobs"
RESTARTS = ("--standalone", "--max-restarts=2")
STRANGER = "import time; time.sleep(600)  # a stranger"
HEADER = ["shape", "mode", "run", "verdict", "culprits (stragglers)", "rules", "s to verdict", "expected", "said"]


@dataclass(frozen=True)
class Shape:
    name: str
    verdict: str
    culprits: tuple[int, ...]
    timeout_s: float             # hangdoc's --timeout: a verdict comes before it or not at all
    loaded: bool = False         # two busy loops for the whole cell
    healthy_clock: bool = False  # seconds counted from the job's start, not from a fault

    def command(self, work: Path) -> list[str]:
        name = self.name
        if name.startswith("restart"):
            mode = "init-hang" if name == "restart-hang" else "recover"
            load = ("--load-s", "12") if self.loaded else ()
            return torchrun_cmd(JOBS / "leave_job.py", "--workdir", str(work), "--mode", mode, "--steps", "300",
                                *load, extra=RESTARTS)
        if name in ("bz2-seeks", "rewind"):
            scenario = _scenario(name)
            scenario.prepare(work)
            return scenario.command(work)
        if name.startswith("wrap-"):
            return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
                    "--no-python", str(_wrap_sh(name.removeprefix("wrap-"), work))]
        return torchrun_cmd(JOBS / "leave_job.py", "--workdir", str(work), "--mode", "skip-save", "--steps", "100")


SHAPES = {s.name: s for s in (
    Shape("restart", "healthy", (), 150, healthy_clock=True),
    Shape("restart-loaded", "healthy", (), 200, loaded=True, healthy_clock=True),
    Shape("restart-hang", "hang", (1,), 240),
    Shape("bz2-seeks", "slow", (1,), 130),     # ends inside the first bz2 batch (about 2 min)
    Shape("rewind", "hang", (1,), 240),
    Shape("wrap-chains", "hang", (1,), 150),
    Shape("wrap-numactl", "hang", (1,), 150),
    Shape("reused-pid", "crash", (1,), 120),
)}


def _scenario(name: str):
    if name == "bz2-seeks":
        return SCENARIOS["bz2-shards"]
    return replace(SCENARIOS["bz2-shards"], name="bz2-rewind", verdict="hang", watched=None,
                   description="a rank-1 worker reads one record of a .tar.bz2 shard again for ever")


def _wrap_sh(shape: str, work: Path) -> Path:
    """wrap.sh: rank 0 under `bash -c`, rank 1 under `env ... timeout ... taskset` (chains), or both
    under numactl; each runs `python stall_job.py --mode bz2`."""
    rank = f"{sys.executable} -u {JOBS / 'stall_job.py'} --workdir {work} --mode bz2"
    if shape == "numactl":
        body = f"numactl --physcpubind=0-1 {rank}\n"
    else:
        body = (f'if [ "$RANK" = 0 ]; then bash -c "{rank}; echo done"\n'
                f"else env HANGDOC_WRAPPED=1 timeout 600 taskset -c 0-1 {rank}; fi\n")
    script = work / "wrap.sh"
    script.write_text("#!/bin/bash\n" + body)
    script.chmod(0o755)
    return script


def not_runnable(shape: str) -> str | None:
    """Why the shape cannot run on this machine, or None."""
    if shape == "wrap-numactl" and shutil.which("numactl") is None:
        return "numactl is not installed"
    if shape == "wrap-chains" and shutil.which("taskset") is None:
        return "taskset is not installed"
    if shape == "reused-pid" and (os.geteuid() != 0 or shutil.which("unshare") is None):
        return "a pid namespace needs root and unshare(1)"
    return None


def _follow(jobs: list[RunningJob], proc: subprocess.Popen, limit_s: float, during=None) -> None:
    """Wait for `proc` (hangdoc) to end, at most `limit_s`, keeping every job's process tree known."""
    deadline = time.monotonic() + limit_s
    while proc.poll() is None and time.monotonic() < deadline:
        for job in jobs:
            job.refresh_tree()
        if during is not None:
            during()
        time.sleep(0.2)


def _busy_loops(n: int = 2) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True,
                             stdin=subprocess.DEVNULL) for _ in range(n)]


def _fault_time(work: Path) -> float | None:
    try:
        text = (work / "fault").read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return float(json.loads(text)["time"]) if text.startswith("{") else float(text.split()[0])
    except (ValueError, KeyError):
        return None


def run_cell(shape: Shape, mode: str, cell_dir: Path, during=None) -> dict:
    """One job of `shape` under `mode`; what hangdoc said, and when, from the fault (or the job's start)."""
    work, record, bundle = cell_dir / "work", cell_dir / "recording", cell_dir / "bundle.json"
    work.mkdir(parents=True, exist_ok=True)
    flags = ["--no-gpu", "--no-live", "--format", "json", "--out", str(bundle), "--record", str(record),
             "--timeout", str(shape.timeout_s)]
    hangdoc = [sys.executable, "-m", "hangdoc"]
    loads = _busy_loops() if shape.loaded else []
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    jobs: list[RunningJob] = []
    started = time.time()
    try:
        cmd = shape.command(work)
        started = time.time()
        if mode == "watch":
            jobs.append(start_job(cmd, cwd=work, log_path=work / "job.log"))
            cmd = [*hangdoc, "watch", str(jobs[0].pid), *flags]
        else:
            cmd = [*hangdoc, "run", *flags, "--", *cmd]
        with open(cell_dir / "report.json", "wb") as out, open(cell_dir / "hangdoc.log", "wb") as err:
            proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        jobs.append(RunningJob(proc))
        _follow(jobs, proc, shape.timeout_s + 90, during)
        ended = time.time()
    finally:
        for job in reversed(jobs):
            stop_job(job)
        for loop in loads:
            os.kill(loop.pid, signal.SIGKILL)
            loop.wait()
    cell = _read(cell_dir, bundle)
    fault = started if shape.healthy_clock else _fault_time(work) or _fault_time(cell_dir)
    at = cell.pop("decided_at", None) or ended
    cell["seconds"] = round(at - fault, 1) if fault else None
    cell["recording"] = str(record)
    cell["exit"] = proc.returncode
    return cell


def _read(cell_dir: Path, bundle: Path) -> dict:
    text = (cell_dir / "report.json").read_text(errors="replace")
    try:
        report = json.loads(text)
    except ValueError:
        return {"verdict": "no report", "culprits": [], "rules": [], "said": ""}
    findings = report.get("findings", [])
    said = (report.get("cause") or [f.get("title", "") for f in findings] or [""])[0]
    slow = report.get("slow") or {}
    culprits = slow.get("stragglers", []) if report.get("verdict") == "slow" else report.get("culprit_ranks", [])
    cell = {"verdict": report.get("verdict"), "culprits": culprits, "next_batch_s": slow.get("next_batch_s"),
            "rules": [f["rule"] for f in findings], "said": said, "cause": report.get("cause", []),
            "estimate": slow.get("next_batch_s") is not None, "batch_waited_s": slow.get("waited_s"),
            "wrapped": sorted(r["rank"] for r in report.get("ranks", ()) if r.get("wrappers")),
            "stranger_in_report": "a stranger" in text}
    if bundle.is_file():
        from hangdoc.bundle.files import load_bundle
        from hangdoc.report.judge import judge

        judged = judge(load_bundle(bundle), lanes=False)
        cell["decided_at"] = judged.diagnosis.decided_at
        # The verdict on the evidence of the last round: where the bench's --timeout ended a run
        # (a timed-out run is a hang by definition), what the rounds before it said.
        cell["on_evidence"] = str(judged.report.verdict)
    return cell


def job_failed(shape: Shape, cell: dict) -> bool:
    """A restart that did not recover by the job's own doing: its restarted ranks refused in gloo's
    connect (a peer address the store handed out), which hangdoc reads as the launcher's making.
    The job did not do what the cell needs; hangdoc's crash is right for it."""
    return (shape.name.startswith("restart") and cell.get("verdict") == "crash"
            and any("the launcher's own making" in line for line in cell.get("cause", ())))


def expected(shape: Shape, cell: dict) -> bool:
    """The cell's verdict is the shape's, named by hangdoc's own reading: a run that the bench's --timeout
    ended is a hang by its definition, so there the verdict on the last round's evidence counts, and
    a hang shape is not met."""
    if "run-timeout" in cell.get("rules", ()):
        return shape.verdict != "hang" and cell.get("on_evidence") == shape.verdict
    right = cell.get("verdict") == shape.verdict and tuple(cell.get("culprits") or ()) == shape.culprits
    if shape.name == "bz2-seeks":
        return right and cell.get("estimate", False)
    if shape.name == "restart-hang":
        return right and "missing-ranks" in cell.get("rules", ())
    if shape.name.startswith("wrap-"):
        return right and cell.get("wrapped") == [0, 1]
    if shape.name == "reused-pid":
        return right and cell.get("stranger_pid") is not None and not cell.get("stranger_in_report")
    return right


def reused_pid_cell(mode: str, cell_dir: Path) -> dict:
    """Inside a pid namespace of its own: the cell, and rank 1's pid given to a stranger once it is free."""
    work = cell_dir / "work"
    held: list[subprocess.Popen] = []
    state: dict = {}

    def take_rank1_pid() -> None:
        ready = work / "ready.1"
        if held or not ready.is_file() or not ready.read_text().strip():
            return
        pid = int(ready.read_text())
        if os.path.exists(f"/proc/{pid}"):      # alive, or a zombie not yet reaped
            return
        if not (cell_dir / "fault").exists():
            (cell_dir / "fault").write_text(f"{time.time()} rank 1 (pid {pid}) has left\n")
        for _ in range(50):
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
            stranger = subprocess.Popen([sys.executable, "-c", STRANGER], start_new_session=True,
                                        stdin=subprocess.DEVNULL)
            if stranger.pid == pid:
                held.append(stranger)
                state["stranger_pid"] = pid
                return
            stranger.kill()
            stranger.wait()

    try:
        cell = run_cell(SHAPES["reused-pid"], mode, cell_dir, during=take_rank1_pid)
    finally:
        for stranger in held:
            os.kill(stranger.pid, signal.SIGKILL)
            stranger.wait()
    cell["stranger_pid"] = state.get("stranger_pid")
    return cell


def _in_namespace(mode: str, cell_dir: Path, limit_s: float) -> dict:
    """The reused-pid cell, run by this module again inside `unshare -p -f --mount-proc`."""
    cmd = ["unshare", "-p", "-f", "--mount-proc", "--kill-child", sys.executable, "-m", "benchmarks.bench_starts",
           "--inside", mode, "--out", str(cell_dir)]
    job = start_job(cmd, log_path=cell_dir.parent / f"{cell_dir.name}.ns.log")
    try:
        _follow([job], job.popen, limit_s)
    finally:
        stop_job(job)
    try:
        return json.loads((cell_dir / "cell.json").read_text())
    except (FileNotFoundError, ValueError):
        return {"verdict": "no cell", "culprits": [], "rules": [], "recording": str(cell_dir / "recording")}


def bench_starts(shapes: list[str], modes: list[str], runs: int, out: Path, progress=print) -> dict:
    results: dict = {"machine": machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "cells": [],
                     "not_runnable": {}}
    for name in shapes:
        why = not_runnable(name)
        if why:
            results["not_runnable"][name] = why
            progress(f"{name}: not runnable here ({why})")
            continue
        shape = SHAPES[name]
        for mode in modes:
            for run in range(1, runs + 1):
                cell_dir = (out / "starts" / f"{name}-{mode}-{run}").resolve()
                shutil.rmtree(cell_dir, ignore_errors=True)
                cell_dir.mkdir(parents=True)
                load = os.getloadavg()[0]
                if name == "reused-pid":
                    cell = _in_namespace(mode, cell_dir, shape.timeout_s + 150)
                else:
                    cell = run_cell(shape, mode, cell_dir)
                cell.update(shape=name, mode=mode, run=run, load_before=round(load, 2),
                            at=time.strftime("%H:%M:%S"), expected=expected(shape, cell),
                            job_failed=job_failed(shape, cell))
                results["cells"].append(cell)
                progress(f"{name} {mode} {run}: {cell['verdict']} {cell['culprits']} {cell['seconds']} s "
                         f"{_mark(cell)} ({cell['recording']})")
    results["ended"] = time.strftime("%Y-%m-%d %H:%M:%S")
    return results


def _mark(cell: dict) -> str:
    return "yes" if cell["expected"] else "job failed" if cell.get("job_failed") else "NO"


def _verdict(cell: dict) -> str:
    if "run-timeout" in cell.get("rules", ()):
        return f"timeout ({cell.get('on_evidence')} on the evidence)"
    return str(cell["verdict"])


def print_starts(results: dict, out=print) -> None:
    rows = [[c["shape"], c["mode"], c["run"], _verdict(c), c["culprits"], ",".join(c.get("rules", ()))[:60],
             c.get("seconds"), _mark(c), (c.get("said") or "")[:80]]
            for c in results["cells"]]
    out(table(f"Starts and ends under watch and run, no flag ({results['machine']})", HEADER, rows))
    for name, why in results["not_runnable"].items():
        out(f"{name}: not runnable here: {why}")
    wrong = [c for c in results["cells"] if not c["expected"]]
    out(f"{len(results['cells']) - len(wrong)} of {len(results['cells'])} cells as expected")
    for c in wrong:
        why = "the job did not recover (gloo's connect after a restart)" if c.get("job_failed") else "WRONG"
        out(f"  {why}: {c['shape']} {c['mode']} {c['run']}: replay with hangdoc replay {c['recording']}")


def main(argv=None) -> int:
    ended_by_sigterm()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_starts", description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--modes", default="watch,run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--inside", help=argparse.SUPPRESS)     # the reused-pid cell, in its namespace
    args = parser.parse_args(argv)
    if args.inside:
        cell = reused_pid_cell(args.inside, Path(args.out))
        (Path(args.out) / "cell.json").write_text(json.dumps(cell, default=str))
        return 0
    results = bench_starts(args.shapes.split(","), args.modes.split(","), args.runs, Path(args.out))
    print()
    print_starts(results)
    write_results(results, args.out, "starts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
