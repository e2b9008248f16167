"""`make bench` section "watch-cost": what the default watch costs a node, and where it goes.

On a healthy 2-rank x 4-worker job (benchmarks/common.py: Job):

- a steady minute: `hangdoc watch PID` in a process of its own, started and left 10 s to settle,
  then its CPU over the next 60 s read from /proc/PID/stat (its own user and system time, and its
  reaped py-spy children's) as a share of one core; then Ctrl-C;
- per round: the real watcher's rounds in this process (`Watcher.step` + `judge_round` + the live
  view's update, at the default interval), each part's CPU (user + system of the thread that runs
  it): discovery, the /proc reads of every process, the ranks' sockets and thread names, the log
  tails, the analysis and rules, the live view; py-spy (the children, user and system apart).

    python -m benchmarks.bench_watch_cost [--seconds 60] [--rounds 30]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTLE_S = 10.0
GOAL_PCT = 3.0


def _times(pid: int) -> tuple[float, float, float, float]:
    """(user, system, children's user, children's system) seconds of a process, from /proc/PID/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    tick = os.sysconf("SC_CLK_TCK")
    return tuple(int(fields[i]) / tick for i in (11, 12, 13, 14))


def steady_minute(pid: int, seconds: float = 60.0) -> dict:
    """`hangdoc watch PID`'s CPU over `seconds` after SETTLE_S, as a share of one core."""
    with tempfile.TemporaryDirectory() as tmp:
        watch = subprocess.Popen([sys.executable, "-m", "hangdoc", "watch", str(pid), "--no-gpu",
                                  "--out", str(Path(tmp) / "w.json.zst")], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, env=dict(os.environ, NO_COLOR="1"),
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            time.sleep(SETTLE_S)
            before, t0 = _times(watch.pid), time.perf_counter()
            time.sleep(seconds)
            after, wall = _times(watch.pid), time.perf_counter() - t0
        finally:
            watch.send_signal(signal.SIGINT)
            try:
                watch.wait(timeout=60)
            except subprocess.TimeoutExpired:
                watch.kill()
                watch.wait()
    user, sys_, kids_user, kids_sys = (a - b for a, b in zip(after, before))
    return {"seconds": round(wall, 1), "core_pct": round(100 * (user + sys_ + kids_user + kids_sys) / wall, 2),
            "user_s": round(user, 2), "sys_s": round(sys_, 2), "pyspy_user_s": round(kids_user, 2),
            "pyspy_sys_s": round(kids_sys, 2), "goal_pct": GOAL_PCT}


PARTS = ("discovery", "proc reads", "sockets + thread names", "log tails", "analysis + rules", "live view")


def per_round(pid: int, rounds: int = 30) -> dict:
    """Each part of a watch round's CPU (ms a round, mean over `rounds` at the default interval)."""
    from hangdoc.collect import snapshot
    from hangdoc.live import watcher as watcher_module
    from hangdoc.live.options import WatchOptions
    from hangdoc.live.probes import make_probes
    from hangdoc.live.watcher import Watcher
    from hangdoc.render.live import LiveView

    spent = dict.fromkeys(PARTS, 0.0)

    def timed(owner, name: str, part: str):
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            t = time.thread_time()
            try:
                return real(*args, **kwargs)
            finally:
                spent[part] += time.thread_time() - t
        setattr(owner, name, wrapper)
        return real

    restore = [(owner, name, timed(owner, name, part)) for owner, name, part in (
        (Watcher, "_rediscover", "discovery"), (snapshot, "_read_proc", "proc reads"),
        (snapshot, "_with_rank_reads", "sockets + thread names"), (watcher_module, "read_tails", "log tails"),
        (Watcher, "judge_round", "analysis + rules"), (LiveView, "update", "live view"))]
    try:
        options = WatchOptions(gpu=False)
        watcher = Watcher(pid, make_probes(options), options)
        view = LiveView(open(os.devnull, "w"), live=True)
        bundle = watcher.start()
        watcher.judge_round(bundle)
        for part in spent:
            spent[part] = 0.0
        own0, kids0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        for _ in range(rounds):
            time.sleep(options.interval_s)
            bundle, judgement = watcher.judge_round(watcher.step())
            view.update(judgement.report)
        own1, kids1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        view.close()
    finally:
        for owner, name, real in restore:
            setattr(owner, name, real)
    ms = {part: round(1000 * s / rounds, 1) for part, s in spent.items()}
    ms["py-spy (children)"] = round(1000 * (kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime) / rounds, 1)
    return {"rounds": rounds, "interval_s": options.interval_s, "parts_ms": ms,
            "watcher_user_ms": round(1000 * (own1.ru_utime - own0.ru_utime) / rounds, 1),
            "watcher_sys_ms": round(1000 * (own1.ru_stime - own0.ru_stime) / rounds, 1),
            "pyspy_user_ms": round(1000 * (kids1.ru_utime - kids0.ru_utime) / rounds, 1),
            "pyspy_sys_ms": round(1000 * (kids1.ru_stime - kids0.ru_stime) / rounds, 1)}


def bench_watch_cost(seconds: float = 60.0, rounds: int = 30) -> dict:
    from benchmarks.common import Job

    with Job("healthy", nproc=2, num_workers=4) as j:
        return {"steady": steady_minute(j.job.pid, seconds), "round": per_round(j.job.pid, rounds)}


def print_watch_cost(r: dict, table) -> None:
    s, p = r["steady"], r["round"]
    print(table(f"Default watch of a healthy 2 x 4 job: a steady {s['seconds']:g} s after {SETTLE_S:g} s",
                ["% of a core", "goal", "watch user s", "watch sys s", "py-spy user s", "py-spy sys s"],
                [[s["core_pct"], f"<= {s['goal_pct']:g} %", s["user_s"], s["sys_s"], s["pyspy_user_s"],
                  s["pyspy_sys_s"]]]))
    print(table(f"Where a round's CPU goes (ms a round, mean of {p['rounds']} at --interval {p['interval_s']:g}; "
                f"watcher user {p['watcher_user_ms']} + sys {p['watcher_sys_ms']}, "
                f"py-spy user {p['pyspy_user_ms']} + sys {p['pyspy_sys_ms']})",
                ["part", "ms a round"], [[part, ms] for part, ms in p["parts_ms"].items()]) + "\n")


def main(argv=None) -> int:
    from benchmarks.common import ended_by_sigterm, table

    ended_by_sigterm()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_watch_cost")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    r = bench_watch_cost(args.seconds, args.rounds)
    print_watch_cost(r, table)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
