"""A restart is a new start: its start-up (imports, init_process_group, no step yet) is judged as a
start-up, its rhythm is learned from its own steps, and a restart whose start-up never finishes is
named with what its ranks wait for. Hand-made bundles of torchrun --max-restarts=1: the first start
steps every second until rank 1 raises; the restart imports, then waits in init_process_group."""
from __future__ import annotations

import dataclasses

from hangdoc.analyze.restarts import restarts_of
from hangdoc.model import (BUNDLE_SCHEMA, Bundle, GpuState, Host, IoCounters, Job, Options, ProcessExit, ProcessInfo,
                           ProcSample, ProcStat, Role, Snapshot, TcpSocket, ThreadCounters)
from hangdoc.render.words import threshold_line
from hangdoc.report.judge import judge
from tests.unit.test_progress import SITE, TRAIN, dump, pyframe
from tests.unit.test_witnesses import C10D

T0 = 1000.0
STORE = 29400


def _rank(pid: int, rank: int, start: int, started: float) -> ProcessInfo:
    env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
           "TORCHELASTIC_RESTART_COUNT": str(start), "TORCHELASTIC_MAX_RESTARTS": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(STORE)}
    return ProcessInfo(pid=pid, ppid=10, role=Role.RANK, cmdline=("python", "train.py"), exe=None,
                       start_time=started, env=env, rank=rank, world_size=2)


def _training(step: int) -> list[dict]:
    return [pyframe("all_reduce", C10D, 2810, {"tensor": (0x91, "<Tensor>")}),
            pyframe("main", TRAIN, 31, {"step": (0x10, str(step))}), pyframe("<module>", TRAIN, 60)]


def _importing(line: int) -> list[dict]:
    """A restarted rank still importing: its module-level frames move from line to line."""
    return [pyframe("_find_and_load", "<frozen importlib._bootstrap>", 1176),
            pyframe("<module>", SITE + "torch/__init__.py", 1000 + 37 * line), pyframe("<module>", TRAIN, 3)]


LOAD = [pyframe("load_model", TRAIN, 12, {"layers": (0x20, "48")}), pyframe("main", TRAIN, 21),
        pyframe("<module>", TRAIN, 60)]
SETUP = [pyframe("_new_process_group_helper", C10D, 1899), pyframe("init_process_group", C10D, 1530),
         pyframe("main", TRAIN, 20), pyframe("<module>", TRAIN, 60)]


def _sample(pid: int, frames: list[dict], cpu: float, sockets: tuple = (), active: bool = True,
            io: int = 1000, wakes: int = 7) -> ProcSample:
    stat = ProcStat(state="S", wchan=None, syscall=None, utime_s=cpu, stime_s=0.0, rss_bytes=1 << 28,
                    num_threads=4, io=IoCounters(io, 1000, 0, 0, 10, 10), sockets=sockets,
                    main_thread=ThreadCounters(cpu_s=cpu, voluntary_switches=wakes, involuntary_switches=3))
    return ProcSample(pid=pid, alive=True, proc=stat, stack=dump(frames, active))


def _sockets(own: int, connects: str | None = None) -> tuple[TcpSocket, ...]:
    found = (TcpSocket(f"127.0.0.1:{own}", "0.0.0.0:0", "LISTEN"),
             TcpSocket(f"127.0.0.1:{own + 100}", f"127.0.0.1:{STORE}", "ESTABLISHED"))
    return found + ((TcpSocket(f"127.0.0.1:{own + 200}", connects, "SYN_SENT"),) if connects else ())


def restarted(setup_s: int, steps_after: int = 0, step_every: int = 1, connects: str | None = None,
              reaped: bool = False, loading: bool = False) -> Bundle:
    """torchrun (pid 10) --max-restarts=1: ranks 11/12 step every second for 10 s and rank 1 raises;
    ranks 21/22 import for 4 s (their frames moving), wait in init_process_group `setup_s` s, then step
    `steps_after` times, one step every `step_every` samples. `connects`: the address restart 1's
    rank 0 tries to connect to in setup. `reaped`: then restart 1's ranks end, reaped by the launcher
    before their statuses could be read (the launcher alive a moment longer). `loading`: restart 1's
    rank 0 got through setup between two samples (never seen there) and loads its model at one line
    while rank 1 is seen in setup."""
    procs = (ProcessInfo(pid=10, ppid=1, role=Role.LAUNCHER, cmdline=("torchrun",), exe=None, start_time=T0 - 5),
             _rank(11, 0, 0, T0 - 3), _rank(12, 1, 0, T0 - 3))
    samples = []
    for i in range(10):
        rows = tuple(_sample(11 + r, _training(i), 1.0 + i, _sockets(30000 + r)) for r in range(2))
        samples.append(Snapshot(T0 + i, 0.05, (ProcSample(10, True), *rows), GpuState("unavailable")))
    begun = T0 + 11
    procs += (_rank(21, 0, 1, begun), _rank(22, 1, 1, begun))
    t = begun
    for i in range(4):      # reading torch's files, waking: what a step of a loop that reads looks like
        rows = tuple(_sample(21 + r, _importing(i), 0.5 * i, io=1000 + 5_000_000 * i, wakes=7 + 50 * i)
                     for r in range(2))
        samples.append(Snapshot(t, 0.05, (ProcSample(10, True), *rows), GpuState("unavailable")))
        t += 1
    for i in range(setup_s):
        rows = tuple(_sample(21, LOAD, 2.0 + 0.15 * i, io=15_001_000, wakes=157) if loading and r == 0 else
                     _sample(21 + r, SETUP, 2.0, _sockets(40000 + r, connects if r == 0 else None), active=False,
                             io=15_001_000, wakes=157) for r in range(2))
        samples.append(Snapshot(t, 0.05, (ProcSample(10, True), *rows), GpuState("unavailable")))
        t += 1
    for i in range(steps_after * step_every):
        rows = tuple(_sample(21 + r, _training(i // step_every), 3.0 + i, io=15_001_000, wakes=157)
                     for r in range(2))
        samples.append(Snapshot(t, 0.05, (ProcSample(10, True), *rows), GpuState("unavailable")))
        t += 1
    exits = (ProcessExit(12, T0 + 10.2, code=1, source="zombie"), ProcessExit(11, T0 + 10.4, signal=15, source="zombie"))
    if reaped:
        samples.append(Snapshot(t, 0.05, (ProcSample(10, True), ProcSample(21, False), ProcSample(22, False)),
                                GpuState("unavailable")))
        exits += (ProcessExit(21, t, source="unseen"), ProcessExit(22, t, source="unseen"))
    return Bundle(schema=BUNDLE_SCHEMA, hangdoc_version="0", created=t, host=Host("node", "x86_64", "6.1", 2, "3.11", "2.13"),
                  job=Job(None, "127.0.0.1", STORE, 2, 10, procs), samples=tuple(samples),
                  options=Options(interval_s=1.0), exits=exits)


def test_a_restart_slow_through_its_start_up_is_no_hang():
    # GIVEN a first start stepping every second (a learned threshold of 10 s), and a restart whose
    # ranks imported (their frames moving) and then waited 40 s in init_process_group (a loaded machine)
    bundle = restarted(setup_s=40)
    # WHEN judged with no threshold given
    report = judge(bundle).report
    # THEN no hang: restart 1 has no step yet, its start-up gets the default, and the report says whose it is
    assert report.verdict != "hang", report.verdict
    assert report.threshold.source == "default" and report.threshold.start == 1
    assert "no step seen yet in restart 1" in threshold_line(report)


def test_a_restart_rank_never_caught_in_setup_has_its_start_up_judged_as_one_too():
    # GIVEN a restart whose rank 0 got through init_process_group between two samples and loads its
    # model at one line for 25 s (a loaded machine: little CPU), while rank 1 is seen waiting in setup
    bundle = restarted(setup_s=25, loading=True)
    # WHEN judged
    report = judge(bundle).report
    # THEN no hang: rank 0's imports before it were the start's start-up, not a rhythm to learn from
    assert report.verdict != "hang", (report.verdict, threshold_line(report))
    assert report.threshold.source == "default", threshold_line(report)


def test_a_restart_learns_its_rhythm_from_its_own_steps():
    # GIVEN the same restart, through its start-up after 40 s, then stepping every 3 s (the first start: every 1 s)
    bundle = restarted(setup_s=40, steps_after=8, step_every=3)
    # WHEN judged
    report = judge(bundle).report
    # THEN healthy, the threshold learned from restart 1's own steps, and said so
    assert report.verdict == "healthy", report.verdict
    assert report.threshold.source == "learned" and report.threshold.longest_step_s >= 2.5
    assert "at most 3.0 s apart in restart 1" in threshold_line(report), threshold_line(report)


def test_a_restart_whose_start_up_never_finishes_is_the_hang_with_what_its_ranks_wait_for():
    # GIVEN a restart whose ranks reached the store and wait in init_process_group for 70 s, no peer connected
    bundle = restarted(setup_s=70)
    # WHEN judged
    report = judge(bundle).report
    # THEN hang, and a critical finding says restart 1 never finished its start-up, waiting for its peers
    assert report.verdict == "hang", report.verdict
    found = next(f for f in report.findings if f.rule == "workers-restarted" and f.severity == "critical")
    assert found.title.startswith("Restart 1 never finished its start-up: its ranks wait in init_process_group for "
                                  "their peers"), found.title
    assert any("reached the store at 127.0.0.1:29400" in line for line in found.evidence), found.evidence
    assert "timeout=timedelta" in found.fix


def test_a_restart_that_connects_to_an_earlier_starts_address_is_named_stale():
    # GIVEN the same, restart 1's rank 0 connecting to 127.0.0.1:30001, where the first start's rank 1 listened
    bundle = restarted(setup_s=70, connects="127.0.0.1:30001")
    # WHEN judged
    report = judge(bundle).report
    # THEN the critical finding names the stale address and whose it was
    found = next(f for f in report.findings if f.rule == "workers-restarted" and f.severity == "critical")
    assert "a stale address from the earlier start (127.0.0.1:30001, rank 1's address in the first start)" in found.title


def test_a_restart_that_ran_to_its_end_reaped_unread_is_no_crash():
    # GIVEN a restart that stepped to its end, its ranks reaped by the launcher before hangdoc could
    # read their exit statuses, the launcher's output saying no failure of them
    bundle = restarted(setup_s=5, steps_after=8, step_every=2, reaped=True)
    # WHEN judged
    report = judge(bundle).report
    # THEN no crash is made of the statuses nobody read: only the first start failed
    assert report.verdict != "crash", (report.verdict, report.culprit_ranks)
    history = next(f for f in report.findings if f.rule == "workers-restarted")
    assert "last start failed" not in history.title, history.title


def test_a_restart_failing_in_setup_is_named_by_the_rank_that_failed_not_the_one_the_launcher_ended():
    # GIVEN restart 1's rank 0 failing in init_process_group (exit 1), its exit read a moment after the
    # launcher's SIGTERM to rank 1 was (the watch's last round read rank 1 first)
    bundle = restarted(setup_s=5)
    end = bundle.samples[-1].time
    bundle = dataclasses.replace(bundle, exits=bundle.exits + (ProcessExit(22, end - 0.01, signal=15, source="zombie"),
                                                               ProcessExit(21, end + 0.2, code=1, source="zombie")))
    # WHEN its restarts are read
    last = restarts_of(bundle).last
    # THEN restart 1 failed by rank 0's exit 1; rank 1's SIGTERM was the launcher's teardown
    assert (last.generation, last.rank, last.code) == (1, 0, 1), last
