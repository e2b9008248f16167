"""The divergence matrix: jobs whose ranks part ways in their own code (tests/jobs/diverge_job.py,
written from users' reports), each under `hangdoc watch` from the launcher's pid and under
`hangdoc run`, no flag. For each cell: the verdict, the culprit named (or none: "cannot tell"),
the cause class, the line where its path left, and the seconds from the fault to the verdict.

    python -m benchmarks.bench_diverge [--modes swallow,earlystop,...] [--out DIR]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ended_by_sigterm, machine, table, write_results
from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

JOB = Path(__file__).resolve().parents[1] / "tests" / "jobs" / "diverge_job.py"
# mode: (ranks, the rank whose path leaves, the cause it must be read as). With three ranks on gloo
# the skipped gather pairs up with the next step's all-reduce and the job goes on (its metrics are
# wrong, it does not hang): right there is any verdict but a hang.
MODES = {
    "swallow": (2, 1, "swallowed-exception"),
    "swallow3": (3, 2, None),
    "earlystop": (3, 2, "own-decision"),
    "handler": (3, 2, "handler-collective"),
    "ddpval": (3, 0, "wrapper-on-one-rank"),
    "clock": (2, 0, "clock-decision"),
    "rank0gather": (2, 0, "rank-branch"),
    "earlyreturn": (2, 1, "early-return"),
}
HANGDOC = [sys.executable, "-m", "hangdoc"]


def _cmd(work: Path, mode: str) -> list[str]:
    ranks = MODES[mode][0]
    return torchrun_cmd(JOB, "--workdir", str(work), "--mode", mode.rstrip("3"), nproc=ranks)


def _cell(bundle: Path, fault: Path, ended: float) -> dict:
    from hangdoc.bundle.files import load_bundle
    from hangdoc.report import judge

    if not bundle.is_file():
        return {"verdict": "no bundle"}
    judgement = judge(load_bundle(bundle))
    split = judgement.diagnosis.divergence
    fault_at = float(fault.read_text()) if fault.is_file() else None
    return {"verdict": str(judgement.report.verdict), "culprits": list(judgement.report.culprit_ranks),
            "cause": str(split.cause) if split else None, "at": split.at if split else None,
            "seconds": round(ended - fault_at, 1) if fault_at else None}


def watch_cell(mode: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="hangdoc-diverge-") as tmp:
        work = Path(tmp)
        job = start_job(_cmd(work, mode), log_path=work / "job.log")
        try:
            markers = [work / f"ready.{r}" for r in range(MODES[mode][0])] + [work / "fault"]
            if not wait_for(markers, job, timeout=120):
                return {"verdict": "job never reached its fault"}
            subprocess.run([*HANGDOC, "watch", str(job.pid), "--out", str(work / "b.json")],
                           capture_output=True, timeout=240)
            return _cell(work / "b.json", work / "fault", time.time())
        finally:
            stop_job(job)


def run_cell(mode: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="hangdoc-diverge-") as tmp:
        work = Path(tmp)
        subprocess.run([*HANGDOC, "run", "--out", str(work / "b.json"), "--", *_cmd(work, mode)],
                       capture_output=True, timeout=300, cwd=work)
        return _cell(work / "b.json", work / "fault", time.time())


def _right(mode: str, cell: dict) -> bool:
    _, culprit, cause = MODES[mode]
    if cause is None:
        return cell.get("verdict") not in ("hang", "no bundle")
    return cell.get("verdict") == "hang" and cell.get("culprits") == [culprit] and cell.get("cause") == cause


def bench_diverge(modes: list[str]) -> dict:
    rows, results = [], {"machine": machine(), "cells": {}}
    for mode in modes:
        for how, cell_of in (("watch", watch_cell), ("run", run_cell)):
            cell = cell_of(mode)
            results["cells"][f"{mode}/{how}"] = cell
            rows.append([mode, how, cell.get("verdict"), cell.get("culprits"), cell.get("cause"),
                         cell.get("seconds"), "right" if _right(mode, cell) else "WRONG", (cell.get("at") or "")[:70]])
    print(table(f"Divergence matrix ({machine()})",
                ["mode", "mode of hangdoc", "verdict", "culprits", "cause", "s from fault", "", "where its path left"], rows))
    return results


def main() -> None:
    ended_by_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args()
    write_results(bench_diverge(args.modes.split(",")), args.out, "diverge")


if __name__ == "__main__":
    main()
