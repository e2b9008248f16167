"""Ranks that torchrun runs under a wrapper (`--no-python` and a shell, `env ... timeout`, `taskset`,
`numactl`, a script of the job's own): watched from the launcher's pid, the ranks are the Python
processes below the wrappers, and the stall is named with its rank. Each job is ended whole, pass or fail."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import JOBS, end_job, hangdoc_cmd, recorded

from hangdoc.scenarios.launch import start_job, wait_for

pytestmark = [pytest.mark.integration]

STALL = JOBS / "stall_job.py"


def wrap_sh(shape: str, workdir) -> list[str]:
    """`torchrun --no-python wrap.sh`, whose ranks run `python stall_job.py --mode mismatch` under `shape`:
    "chains" runs rank 0 under `bash -c '...; echo done'` and rank 1 under `env ... timeout ... taskset ...
    | tee` (a shell, env, timeout, taskset and a tee pipeline in one job); "numactl" both under numactl."""
    rank = " ".join([sys.executable, "-u", str(STALL), "--workdir", str(workdir), "--mode", "mismatch"])
    if shape == "numactl":
        if shutil.which("numactl") is None:
            pytest.skip("numactl is not installed here")
        body = f"numactl --physcpubind=0-1 {rank}\n"
    else:
        if shutil.which("taskset") is None:
            pytest.skip("taskset is not installed here")
        body = (f'if [ "$RANK" = 0 ]; then bash -c "{rank}; echo done"\n'
                f"else env HANGDOC_WRAPPED=1 timeout 600 taskset -c 0-1 {rank} 2>&1 | tee -a {workdir}/rank1.log; fi\n")
    script = workdir / "wrap.sh"
    script.write_text("#!/bin/bash\n" + body + "echo done\n")
    script.chmod(0o755)
    return [str(script)]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("shape", ["chains", "numactl"])
def test_ranks_behind_wrappers_are_diagnosed_as_the_ranks(tmp_path, shape):
    # GIVEN torchrun --no-python wrap.sh running each rank under wrappers; rank 1 goes to a barrier while
    # rank 0 is in all_reduce
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", "--no-python",
           *wrap_sh(shape, tmp_path)]
    job = start_job(cmd, cwd=tmp_path, log_path=tmp_path / "job.log")
    try:
        if not wait_for([tmp_path / "ready.0", tmp_path / "ready.1", tmp_path / "fault"], job, timeout=60):
            pytest.fail("job did not reach its markers:\n" + (tmp_path / "job.log").read_text(errors="replace")[-3000:])
        # WHEN hangdoc watches the launcher's pid
        done = subprocess.run([*hangdoc_cmd(), *recorded("watch"), str(job.popen.pid), "--interval", "0.5", "--hang-after", "4",
                               "--no-live", "--no-gpu", "--format", "json", "--out", str(tmp_path / "b.json"),
                               "--timeout", "60"], capture_output=True, text=True, timeout=90)
    finally:
        end_job(job)
    # THEN a hang, rank 1 named, and the ranks are the Python processes, each below its wrappers
    assert done.stdout.strip(), f"exit {done.returncode}: {done.stderr[-2000:]}"
    report = json.loads(done.stdout)
    assert (done.returncode, report["verdict"], report["culprit_ranks"]) == (3, "hang", [1]), done.stderr[-2000:]
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert sorted(ranks) == [0, 1] and all(r["top_frame"] for r in ranks.values())
    heads = {rank: [w["cmdline"][:2] for w in r["wrappers"]] for rank, r in ranks.items()}
    script = ["/bin/bash", str(tmp_path / "wrap.sh")]
    if shape == "chains":       # env and taskset exec the next program: no process of their own
        assert heads == {0: [script, ["bash", "-c"]], 1: [script, ["timeout", "600"]]}, heads
    else:
        assert heads == {0: [script], 1: [script]}, heads
