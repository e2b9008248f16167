"""How a rank ended decides the verdict: exit 0 is a good end, a signal or an error code is the crash,
and the rank-died finding says how it died. Bundles built in code; no process runs."""
from __future__ import annotations

import dataclasses

import pytest

from factories import ALL_REDUCE, save_node
from hangdoc.analyze.diagnose import diagnose, node_digest
from hangdoc.bundle.files import load_bundle
from hangdoc.inputs.fold import diagnose_by_class, read_node
from hangdoc.model import (
    BUNDLE_SCHEMA, Bundle, GpuState, Host, IoCounters, Job, LogTail, OomCount, Options, ProcessExit, ProcessInfo,
    ProcSample, ProcStat, Role, Snapshot, Stack, Thread,
)
from hangdoc.report import judge
from hangdoc.report.judge import exit_code

T0 = 1_700_000_000.0
INTERVAL = 0.5
LAUNCHER = 99
ROOT_CAUSE_ABORT = (
    "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
    "  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] "
    "op.preamble.length <= op.nbytes. 64 vs 4. Received data size doesn't match expected size. "
    "Is there a distributed collective mismatch in your code?",
    "W1125 00:27:55.577000 32510 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 101 "
    "closing signal SIGTERM",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "/work/train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  time      : 2026-11-25_00:27:55",
    "  host      : localhost",
    "  rank      : 1 (local_rank: 1)",
    "  exitcode  : -15 (pid: 101)  (SIGTERM)",
    "  error_file: <N/A>",
    "  traceback : Signal 15 (SIGTERM) received by PID 101",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-11-25_00:27:55",
    "  host      : localhost",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : -6 (pid: 100)  (SIGABRT)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 100",
    "============================================================",
)


def rank_pid(rank: int) -> int:
    return 100 + rank


def stat(rss_mb: int = 300) -> ProcStat:
    return ProcStat(state="S", wchan="futex_wait_queue", syscall="202", utime_s=10.0, stime_s=1.0,
                    rss_bytes=rss_mb << 20, num_threads=8, io=IoCounters(0, 0, 0, 0, 0, 0))


def job_bundle(alive: dict[int, int], samples: int, exits: tuple[ProcessExit, ...] = (), logs: tuple[str, ...] = (),
               rss_mb: dict[int, list[int]] | None = None) -> Bundle:
    """GIVEN a 2-rank job sampled every 0.5 s: rank r is alive (in all_reduce) in its first alive[r]
    samples and gone after; `exits` are the records a watch read; `logs` the job's output."""
    world = len(alive)
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none",
           "WORLD_SIZE": str(world), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1"}
    procs = [ProcessInfo(LAUNCHER, 1, Role.LAUNCHER, ("python", "-m", "torch.distributed.run", "train.py"),
                         "/usr/bin/python3", T0 - 10)]
    for r in alive:
        procs.append(ProcessInfo(rank_pid(r), LAUNCHER, Role.RANK, ("python", "train.py"), "/usr/bin/python3", T0 - 5,
                                 dict(env, RANK=str(r), LOCAL_RANK=str(r)), r, r, 0, world, rank_pid(r)))
    snaps = []
    for k in range(samples):
        rows = [ProcSample(LAUNCHER, True, stat(), None)]
        for r, n in alive.items():
            if k < n:
                mem = (rss_mb or {}).get(r)
                rss = mem[min(k, len(mem) - 1)] if mem else 300
                main = Thread(rank_pid(r), "MainThread", False, False, ALL_REDUCE)
                rows.append(ProcSample(rank_pid(r), True, stat(rss), Stack((main,))))
            else:
                gone = ("proc: could not collect: the process has exited",)
                rows.append(ProcSample(rank_pid(r), False, None, None, gone))
        snaps.append(Snapshot(T0 + k * INTERVAL, 0.05, tuple(rows), GpuState("unavailable", "test")))
    job = Job("none", "127.0.0.1", 29500, world, LAUNCHER, tuple(procs))
    host = Host("vm", "x86_64", "6.1.0", 2, "3.11", "2.13.0")
    return Bundle(BUNDLE_SCHEMA, "0.1.0", T0 + samples, host, job, tuple(snaps),
                  logs=(LogTail("/work/job.log", logs),) if logs else (),
                  options=Options(interval_s=INTERVAL), exits=exits)


def died(rank: int, at: float, code: int | None = None, signal: int | None = None, **more) -> ProcessExit:
    source = "zombie" if code is not None or signal is not None else "unseen"
    return ProcessExit(rank_pid(rank), T0 + at, code, signal, False, source, **more)


def rank_died(report):
    return [f for f in report.findings if f.rule == "rank-died"]


# --- a good end ----------------------------------------------------------------------------------


def test_every_rank_exiting_0_with_no_output_is_healthy():
    # GIVEN a job that printed nothing and whose ranks both exited 0 (read as they died)
    bundle = job_bundle({0: 4, 1: 4}, 6, exits=(died(0, 1.8, code=0), died(1, 1.8, code=0)))
    # WHEN diagnosed
    report = judge(bundle).report
    # THEN it ended well: healthy, exit 0, nothing critical
    assert report.verdict == "healthy" and exit_code(report.verdict) == 0
    assert report.culprit_ranks == () and not rank_died(report)


def test_without_exit_records_a_silent_end_is_still_unknown():
    # GIVEN the same silent end, from an older bundle (no exit records)
    bundle = job_bundle({0: 4, 1: 4}, 6)
    # THEN nothing says how it ended: "ended, cause unknown" (exit 5), as before
    assert judge(bundle).report.verdict == "ended"


def test_ranks_that_exit_0_seconds_apart_are_healthy_not_a_crash():
    # GIVEN a ragged teardown: rank 0 exited 0 at +1.8 s, rank 1 lingered 6 s more before exiting 0
    early = job_bundle({0: 4, 1: 17}, 17, exits=(died(0, 1.8, code=0),))
    ended = job_bundle({0: 4, 1: 17}, 19, exits=(died(0, 1.8, code=0), died(1, 8.3, code=0)))
    # WHEN diagnosed while rank 1 still lingers (6 s after rank 0 left) and after it left
    # THEN never a crash; healthy once both are gone
    assert judge(early).report.verdict != "crash"
    assert judge(ended).report.verdict == "healthy"
    # and without the exit records the same samples race CRASH_GRACE, as they did
    assert judge(dataclasses.replace(early, exits=())).report.verdict == "crash"


def test_a_launcher_that_failed_is_not_overruled_by_ranks_that_exited_0():
    # GIVEN ranks that exited 0, under `hangdoc run`, whose launcher exited 1
    bundle = dataclasses.replace(job_bundle({0: 4, 1: 4}, 6, exits=(died(0, 1.8, code=0), died(1, 1.8, code=0))),
                                 exit_code=1)
    # THEN the launcher's failure stands
    assert judge(bundle).report.verdict == "crash"


# --- a crash -------------------------------------------------------------------------------------


def test_a_failed_command_whose_ranks_left_after_the_last_round_unread_is_a_crash():
    # GIVEN ranks seen alive in every round, then gone with their statuses unread (the command
    # reaped them first), under a command that exited 1 after printing its error
    bundle = dataclasses.replace(
        job_bundle({0: 6, 1: 6}, 6, exits=(died(0, 3.2), died(1, 3.2)), logs=("RuntimeError: the upload failed",)),
        exit_code=1)
    # WHEN diagnosed
    report = judge(bundle).report
    # THEN the command's failure stands: a crash, never a healthy end
    assert report.verdict == "crash", report.verdict


def test_rank_killed_by_sigkill_then_torchrun_sigterm_is_a_crash_of_the_killed_rank():
    # GIVEN rank 1 SIGKILLed at +1.8 s and rank 0 SIGTERMed by torchrun 0.1 s later
    exits = (died(1, 1.8, signal=9), died(0, 1.9, signal=15))
    bundle = job_bundle({0: 4, 1: 4}, 5, exits=exits)
    # WHEN diagnosed
    report = judge(bundle).report
    # THEN a crash (exit 4) of rank 1 alone; rank-died says SIGKILL and that rank 0 was the teardown
    assert report.verdict == "crash" and exit_code(report.verdict) == 4
    assert report.culprit_ranks == (1,)
    [found] = rank_died(report)
    assert found.ranks == (1,) and "SIGKILL" in found.title and "rank 1 (pid 101)" in found.title.lower()
    assert any("rank 0 (pid 100) was killed by SIGTERM 0.10 s later" in e for e in found.evidence)
    assert "OOM killer" in found.fix
    # and the crash story stays out of the report: the finding carries the cause
    assert report.cause == ()


@pytest.mark.parametrize("rank0", [dict(signal=15), dict(code=1)])
def test_read_at_one_instant_the_fatal_signal_is_the_cause(rank0):
    # GIVEN both exits read in the same wake-up: rank 1 SIGKILL, rank 0 SIGTERMed (the teardown)
    # or exited 1 (its peer's connection closed)
    bundle = job_bundle({0: 4, 1: 4}, 5, exits=(died(0, 1.8, **rank0), died(1, 1.8, signal=9)))
    # THEN the SIGKILLed rank alone is the culprit
    assert judge(bundle).report.culprit_ranks == (1,)


def test_a_rank_crashing_while_the_other_lives_is_named_at_once():
    # GIVEN rank 1 SIGKILLed, read as it died, rank 0 still alive (the watch looks again at once)
    bundle = job_bundle({0: 5, 1: 4}, 5, exits=(died(1, 1.8, signal=9),))
    # THEN a crash of rank 1 straight away, not after CRASH_GRACE
    report = judge(bundle).report
    assert (report.verdict, report.culprit_ranks) == ("crash", (1,))


def test_an_unread_exit_before_the_teardown_is_the_culprit():
    # GIVEN rank 1 gone first (its parent reaped it before hangdoc could read it), then rank 0 SIGTERMed
    bundle = job_bundle({0: 4, 1: 3}, 5, exits=(died(1, 1.2), died(0, 1.9, signal=15)))
    # THEN rank 1, the first to go, is the culprit; rank-died says its status could not be read
    report = judge(bundle).report
    assert (report.verdict, report.culprit_ranks) == ("crash", (1,))
    [found] = rank_died(report)
    assert "could not be read" in found.title


def test_an_oom_kill_is_told_with_the_counter_and_the_memory():
    # GIVEN rank 1 SIGKILLed while its cgroup's oom_kill count went 0 -> 1, its memory growing
    oom = (OomCount("/sys/fs/cgroup/job/memory.events", 0, 1), OomCount("/proc/vmstat", 3, 3))
    exits = (died(1, 1.8, signal=9, last_rss_bytes=2900 << 20, peak_rss_bytes=2900 << 20, oom=oom),)
    bundle = job_bundle({0: 5, 1: 4}, 5, exits=exits, rss_mb={1: [300, 900, 1800, 2900]})
    # WHEN diagnosed
    [found] = rank_died(judge(bundle).report)
    # THEN the OOM killer is named, with the counter and the memory that grew; the fix is about memory
    assert "OOM killer" in found.title
    text = "\n".join(found.evidence)
    assert "oom_kill in /sys/fs/cgroup/job/memory.events went 0 -> 1" in text
    assert "oom_kill in /proc/vmstat stayed at 3" in text
    assert "3040.9 MB at the last sample before it died" in text and "up from 314.6 MB" in text
    assert "batch size" in found.fix


def test_a_python_exception_exit_is_quoted_once_as_the_cause():
    # GIVEN rank 1 exited 1 after raising, its traceback in the job's output
    logs = ("[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "/work/train.py", line 88, in step',
            "[rank1]:     loss = model(batch).sum() / batch['n']",
            "[rank1]: ZeroDivisionError: division by zero")
    bundle = job_bundle({0: 5, 1: 4}, 5, exits=(died(1, 1.8, code=1),), logs=logs)
    # THEN rank-died says exit code 1; the exception and where it was raised are the report's cause, once
    report = judge(bundle).report
    [found] = rank_died(report)
    assert "exited with code 1" in found.title and "exception quoted at the top" in found.fix
    assert report.cause == ("rank 1 raised ZeroDivisionError: division by zero",
                            "  at train.py:88 in step: loss = model(batch).sum() / batch['n']")
    assert not any("ZeroDivisionError" in e for e in found.evidence)


def test_without_exit_records_torchruns_root_cause_tells_how_the_rank_died():
    # GIVEN an older bundle (no exit records): gloo aborted rank 0, torchrun's Root Cause says -6 (SIGABRT)
    bundle = job_bundle({0: 3, 1: 4}, 5, logs=ROOT_CAUSE_ABORT)
    # WHEN diagnosed (as `hangdoc report` on it, or `hangdoc run`, would)
    report = judge(bundle).report
    # THEN a crash of rank 0, killed by SIGABRT, gloo's own line quoted, a collective mismatch as the fix
    assert (report.verdict, report.culprit_ranks) == ("crash", (0,))
    [found] = rank_died(report)
    assert "Rank 0 (pid 100) was killed by SIGABRT" == found.title
    assert any("Is there a distributed collective mismatch in your code?" in e for e in found.evidence)
    assert any("torchrun's Root Cause" in e and "-6" in e for e in found.evidence)
    assert "collective mismatch" in found.fix and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in found.fix
    assert ("rank 1's last stack (+1.5 s): train.py:121 in train_step, "
            "inside all_reduce (torch/distributed/distributed_c10d.py:2806)") in found.evidence
    assert report.cause == ()


def test_a_healthy_or_hung_job_has_no_rank_died():
    # GIVEN a healthy end and a job still running THEN rank-died stays quiet
    ended = job_bundle({0: 4, 1: 4}, 6, exits=(died(0, 1.8, code=0), died(1, 1.8, code=0)))
    running = job_bundle({0: 6, 1: 6}, 6)
    assert not rank_died(judge(ended).report) and not rank_died(judge(running).report)


@pytest.mark.parametrize("signal, words", [(11, "native crash"), (7, "/dev/shm"), (2, "came from outside")])
def test_the_fix_fits_the_signal(signal, words):
    # GIVEN rank 1 killed by SIGSEGV / SIGBUS / SIGINT THEN the fix speaks of that way of dying
    bundle = job_bundle({0: 5, 1: 4}, 5, exits=(died(1, 1.8, signal=signal),))
    [found] = rank_died(judge(bundle).report)
    assert words in found.fix


# --- the digest: a saved node and a job of many nodes decide alike -------------------------------


def test_the_digest_carries_the_exit_and_a_saved_node_decides_the_same(tmp_path):
    # GIVEN the SIGKILL crash, saved as a watch saves it (bundle v2 with the node's digest)
    bundle = job_bundle({0: 4, 1: 4}, 5, exits=(died(1, 1.8, signal=9), died(0, 1.9, signal=15)))
    path = save_node(bundle, tmp_path / "node.json.zst")
    # WHEN read back whole, and read by its digest as a job of thousands of nodes is
    back = load_bundle(path)
    node = read_node(path)
    _, by_class = diagnose_by_class([node])
    # THEN the exits round-trip, the digest has rank 1's signal, and both decide crash of rank 1
    assert back.exits == bundle.exits
    digest = {r.rank: r for r in node.digest.ranks}
    assert (digest[1].exit_signal, digest[1].exit_code, digest[1].exit_time) == (9, None, T0 + 1.8)
    assert (by_class.verdict, by_class.culprits) == (diagnose(back).verdict, diagnose(back).culprits) == ("crash", (1,))


def test_an_old_digest_without_exits_still_reads():
    # GIVEN an older bundle: no exits anywhere THEN its digest has no exit fields and decides as before
    digest = node_digest(job_bundle({0: 4, 1: 4}, 6))
    assert all(r.exit_time is None and not r.exit_told for r in digest.ranks)
