"""Run a scenario by hand: `python -m hangdoc.scenarios NAME --workdir DIR [--max-steps N]`.

Writes the scenario's data, prints the torchrun command and the launcher's pid (what
`hangdoc watch` attaches to), runs the job with its output on this terminal, and on Ctrl-C
ends all of it: the launcher, the ranks and DataLoader workers that a busy decompression
would otherwise keep alive for minutes. `--list` prints the scenarios and their ground truth.
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time

from hangdoc.scenarios import SCENARIOS
from hangdoc.scenarios.launch import RunningJob, stop_job


def print_scenarios() -> None:
    for s in SCENARIOS.values():
        culprit = ",".join(map(str, s.culprit_ranks)) or "-"
        print(f"{s.name:18} {s.verdict:8} culprit={culprit:3} rule={s.expected_rule or '-':20} "
              f"{s.description}")


def run(cmd: list[str]) -> int:
    """Run the job in a session of its own (so Ctrl-C reaches us, not the ranks) until it ends."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("OMP_NUM_THREADS", "1")
    job = RunningJob(subprocess.Popen(cmd, env=env, start_new_session=True))
    print(f"launcher pid {job.pid}", flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while job.popen.poll() is None:
            job.refresh_tree()
            time.sleep(0.2)
        return job.popen.returncode
    except KeyboardInterrupt:
        print("stopping the job", file=sys.stderr, flush=True)
        return 130
    finally:
        stop_job(job)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hangdoc.scenarios",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", choices=sorted(SCENARIOS), metavar="NAME")
    parser.add_argument("--workdir", help="where the data, the markers and checkpoints go")
    parser.add_argument("--max-steps", type=int, help="stop after this many steps")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--dry-run", action="store_true", help="prepare and print the command only")
    args = parser.parse_args(argv)
    if args.list or not args.name:
        print_scenarios()
        return 0
    if not args.workdir:
        parser.error("--workdir is required to run a scenario")
    scenario = SCENARIOS[args.name]
    scenario.prepare(args.workdir)
    cmd = scenario.command(args.workdir, max_steps=args.max_steps)
    print(shlex.join(cmd), flush=True)
    return 0 if args.dry_run else run(cmd)


if __name__ == "__main__":
    sys.exit(main())
