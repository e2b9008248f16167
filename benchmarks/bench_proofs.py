"""How soon a proven hang is named: for each proof, the seconds from the fault to the verdict under
`watch` from the start (the launcher's pid) and under `run`, and the verdict on the same job showing
the proof's look-alike and going on (a rank stopped for 1 s, a lock taken and released, a pdb
prompt answered, a producer thread that stalls 3 s, two processes taking one file lock in turn, a
pipe read while its writer still writes, a peer that leaves after the last collective).

    python -m benchmarks.bench_proofs [--proofs stopped,fork-lock,lock-cycle,pdb-prompt,
                                                  dead-producer,pipe-no-writer,peer-gone]
                                      [--modes watch,run] [--out DIR]

The jobs are tests/jobs/proof_job.py (2 ranks on gloo); the fault's time is the job's own marker
(WORKDIR/fault), or the bench's, where it stops rank 1 itself. The verdict's time is the last
sample of the bundle hangdoc saved (when it decided), judged again here with `judge`.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import machine, table, write_results
from hangdoc.bundle.files import load_bundle
from hangdoc.live.proc import RunningJob, start_job, stop_job
from hangdoc.report.judge import judge
from hangdoc.scenarios.launch import torchrun_cmd

JOB = Path(__file__).resolve().parent.parent / "tests" / "jobs" / "proof_job.py"
CELL_TIMEOUT_S = 150.0
STOP_AFTER_S = 3.0       # after rank 1's first step, the bench stops it (stopped's fault and look-alike)
BRIEF_STOP_S = 1.0


@dataclass(frozen=True)
class ProofCase:
    proof: str
    fault: str               # proof_job's mode that hangs
    lookalike: str           # its mode that shows the look-alike and goes on
    stop: bool = False       # the bench stops rank 1 (SIGSTOP): for good in the fault, briefly in the look-alike


CASES = (
    ProofCase("stopped", "train", "train", stop=True),
    ProofCase("fork-lock", "fork-lock", "lock-free"),
    ProofCase("lock-cycle", "lock-cycle", "lock-turns"),
    ProofCase("pdb-prompt", "pdb", "pdb-answered"),
    ProofCase("dead-producer", "producer-died", "producer-slow"),
    ProofCase("pipe-no-writer", "pipe-self", "pipe-closed"),
    ProofCase("peer-gone", "peer-left", "peer-left-late"),
)
HEADER = ["proof", "latency watch s", "latency run s", "look-alike verdict (watch / run)", "named by"]


def _cell(case: ProofCase, mode: str, hang: bool, work: Path) -> dict:
    """One job under `mode` ("watch" or "run"); what hangdoc said and when, against the fault."""
    work.mkdir(parents=True, exist_ok=True)
    bundle = work / "bundle.json"
    job_args = ["--workdir", str(work), "--mode", case.fault if hang else case.lookalike]
    cmd = torchrun_cmd(JOB, *job_args)
    hangdoc = [sys.executable, "-m", "hangdoc"]
    env = dict(os.environ, NO_COLOR="1")
    job: RunningJob | None = None
    if mode == "run":
        watcher = subprocess.Popen([*hangdoc, "run", "--no-gpu", "--out", str(bundle), "--timeout",
                                    str(CELL_TIMEOUT_S), "--", *cmd], cwd=work, env=env, start_new_session=True,
                                   stdout=open(work / "hangdoc.txt", "wb"), stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    else:
        job = start_job(cmd, cwd=work, log_path=work / "job.log")
        watcher = subprocess.Popen([*hangdoc, "watch", str(job.pid), "--no-gpu", "--out", str(bundle),
                                    "--timeout", str(CELL_TIMEOUT_S)], cwd=work, env=env, start_new_session=True,
                                   stdout=open(work / "hangdoc.txt", "wb"), stderr=subprocess.STDOUT)
    try:
        if case.stop:
            _stop_rank1(work, forever=hang, deadline=time.monotonic() + 60)
        watcher.wait(timeout=CELL_TIMEOUT_S + 30)
    except subprocess.TimeoutExpired:
        os.killpg(watcher.pid, signal.SIGKILL)
        watcher.wait()
    finally:
        if job is not None:
            stop_job(job)
    fault = work / "fault"
    fault_at = float(fault.read_text().split()[0]) if fault.exists() else None
    if not bundle.exists():
        return {"verdict": None, "proof": None, "latency_s": None, "exit": watcher.returncode}
    diagnosis = judge(load_bundle(bundle), lanes=False).diagnosis
    latency = round(diagnosis.decided_at - fault_at, 1) if fault_at is not None and hang else None
    return {"verdict": str(diagnosis.verdict), "proof": diagnosis.proof.kind if diagnosis.proof else None,
            "latency_s": latency, "exit": watcher.returncode,
            "threshold_s": diagnosis.rhythm.threshold_s if diagnosis.rhythm else None}


def _stop_rank1(work: Path, forever: bool, deadline: float) -> None:
    ready = work / "ready.1"
    while not ready.exists() or not ready.read_text().strip():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    pid = int(ready.read_text())
    time.sleep(STOP_AFTER_S)
    os.kill(pid, signal.SIGSTOP)
    (work / "fault").write_text(f"{time.time()} rank 1 pid {pid}: SIGSTOP\n")
    if not forever:
        time.sleep(BRIEF_STOP_S)
        os.kill(pid, signal.SIGCONT)


def bench_proofs(proofs: list[str] | None = None, modes: tuple[str, ...] = ("watch", "run"),
                 progress=print) -> dict:
    """Each proof's hang and look-alike under each mode, one job at a time."""
    rows = []
    for case in CASES:
        if proofs and case.proof not in proofs:
            continue
        row: dict = {"proof": case.proof}
        for mode in modes:
            for hang in (True, False):
                with tempfile.TemporaryDirectory(prefix=f"hangdoc-proof-{case.proof}-") as tmp:
                    cell = _cell(case, mode, hang, Path(tmp))
                row[f"{mode}_{'hang' if hang else 'lookalike'}"] = cell
                progress(f"{case.proof} {mode} {'fault' if hang else 'look-alike'}: {cell}")
        rows.append(row)
    return {"machine": machine(), "rows": rows,
            "goal": "each proof's hang named within 5 s of the fault; every look-alike healthy, no proof named"}


def table_rows(results: dict) -> list[list]:
    def latency(cell: dict | None) -> str:
        if not cell:
            return "-"
        if cell["verdict"] != "hang":
            return f"missed ({cell['verdict']})"
        return f"{cell['latency_s']:g}" if cell["latency_s"] is not None else "?"

    out = []
    for row in results["rows"]:
        looks = [row.get(f"{m}_lookalike") for m in ("watch", "run")]
        said = " / ".join((c["verdict"] or "?") + (f" (proof: {c['proof']})" if c and c["proof"] else "")
                          if c else "-" for c in looks)
        hangs = [row.get(f"{m}_hang") for m in ("watch", "run")]
        named = sorted({c["proof"] or "threshold" for c in hangs if c and c["verdict"] == "hang"})
        out.append([row["proof"], latency(hangs[0]), latency(hangs[1]), said, ", ".join(named) or "-"])
    return out


def print_proofs(results: dict, out=print) -> None:
    out(table("Proven hangs: seconds from the fault to the verdict, and the look-alike's verdict", HEADER,
              table_rows(results)) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_proofs", description=__doc__.split("\n")[0])
    parser.add_argument("--proofs", help=f"comma-separated, of {', '.join(c.proof for c in CASES)}")
    parser.add_argument("--modes", default="watch,run")
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args(argv)
    results = bench_proofs(args.proofs.split(",") if args.proofs else None, tuple(args.modes.split(",")))
    print()
    print_proofs(results)
    write_results(results, args.out, "proofs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
