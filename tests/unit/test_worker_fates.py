"""DataLoader workers that end with their epoch or loader are retired, not dead: bundles built in code.

A DataLoader with `persistent_workers=False` (its default) ends its workers when an epoch's
iterator runs out and forks new ones for the next; a validation loader forks its own and ends
them after the pass. None of that is a death: not a worker-died finding, not a row in the report,
not a worker counted by gpu-starved. A worker killed alone while its sibling runs and its rank
waits for data is.
"""
from __future__ import annotations

import dataclasses
import io

import pytest

from factories import DATALOADER_WAIT, WORKER_IDLE
from hangdoc.analyze.workers import Fate, worker_fates
from hangdoc.model import (
    BUNDLE_SCHEMA, Bundle, FrameMark, GpuState, Host, IoCounters, Job, LogTail, LoopMark, Options, ProcessInfo,
    ProcSample, ProcStat, Role, Snapshot, Stack, Thread,
)
from hangdoc.render.live import live_table
from hangdoc.render.text import make_console
from hangdoc.report import judge

T0 = 1_700_000_000.0
LAUNCHER = 99


def _stat(cpu: float) -> ProcStat:
    return ProcStat(state="S", wchan="futex_wait_queue", syscall="202", utime_s=cpu, stime_s=0.0,
                    rss_bytes=300 << 20, num_threads=4, io=IoCounters(0, 0, 0, 0, 0, 0))


def _rank_sample(pid: int, step: int, frames=DATALOADER_WAIT) -> ProcSample:
    loop = LoopMark((FrameMark("<module>", 262, "m"), FrameMark("main", 251, "a", (("step", step),))))
    main = Thread(pid, "MainThread", False, False, frames, loop)
    return ProcSample(pid, True, _stat(10.0 + step), Stack((main,)))


def _worker_sample(pid: int, cpu: float) -> ProcSample:
    return ProcSample(pid, True, _stat(cpu), Stack((Thread(pid, "MainThread", False, False, WORKER_IDLE),)))


def _gone(pid: int) -> ProcSample:
    return ProcSample(pid, False, errors=("proc: could not collect: the process has exited",))


def epochs_job(epochs: int = 10, epoch_s: float = 6.0, interval_s: float = 2.0, workers: int = 2,
               ranks: int = 2, kill: tuple[int, int, float] | None = None, validation: float | None = None,
               stop_stepping_at: float | None = None) -> Bundle:
    """A healthy 2-rank job watched every `interval_s`: every epoch's iterator forks `workers` new
    workers per rank (persistent_workers=False) and ends them 0.2 s into the next epoch; the
    ranks step at every sample and wait on their DataLoader.

    `kill` = (rank, worker index, time): that worker of the last generation is gone from then on,
    its sibling lives. `validation`: each rank forks 2 more workers at that time (a validation
    loader) that end 3 s later. `stop_stepping_at`: the ranks' loops stand still from then on."""
    infos = [ProcessInfo(LAUNCHER, 1, Role.LAUNCHER, ("torchrun", "train.py"), None, T0 - 5)]
    spans: list[tuple[ProcessInfo, float, float]] = []   # worker, start, end
    for r in range(ranks):
        rpid = 100 + 1000 * r
        env = {"RANK": str(r), "WORLD_SIZE": str(ranks)}
        infos.append(ProcessInfo(rpid, LAUNCHER, Role.RANK, ("python", "train.py"), None, T0 - 4, env,
                                 r, r, 0, ranks, rpid))
        pid = rpid
        for e in range(epochs):
            for k in range(workers):
                pid += 1
                start = T0 + e * epoch_s + 0.3 + 0.02 * k
                end = T0 + (e + 1) * epoch_s + 0.2 if e < epochs - 1 else float("inf")
                if kill is not None and kill[0] == r and kill[1] == k and e == epochs - 1:
                    end = kill[2]
                w = ProcessInfo(pid, rpid, Role.WORKER, ("python", "train.py"), None, start, env, r, r, 0, ranks,
                                rpid, k, workers, "fork")
                infos.append(w)
                spans.append((w, start, end))
        if validation is not None:
            for k in range(2):
                pid += 1
                w = ProcessInfo(pid, rpid, Role.WORKER, ("python", "train.py"), None, validation + 0.02 * k, env,
                                r, r, 0, ranks, rpid, k, 2, "fork")
                infos.append(w)
                spans.append((w, validation + 0.02 * k, validation + 3.0))
    samples = []
    count = int(epochs * epoch_s / interval_s)
    for i in range(count):
        t = T0 + i * interval_s
        step = i if stop_stepping_at is None or t < stop_stepping_at else int((stop_stepping_at - T0) / interval_s)
        procs = [ProcSample(LAUNCHER, True, _stat(1.0))]
        procs += [_rank_sample(p.pid, step) for p in infos if p.role is Role.RANK]
        for w, start, end in spans:
            if t >= start:
                procs.append(_worker_sample(w.pid, 1.0 + 0.5 * (t - start)) if t < end else _gone(w.pid))
        samples.append(Snapshot(t, 0.05, tuple(procs), GpuState("unavailable", "watched with --no-gpu")))
    job = Job("run", "127.0.0.1", 29500, ranks, LAUNCHER, tuple(infos))
    host = Host("node", "x86_64", "6.1", 2, "3.11", "2.13.0")
    return Bundle(BUNDLE_SCHEMA, "0.1.0", samples[-1].time, host, job, tuple(samples),
                  options=Options(interval_s=interval_s))


def rules(bundle: Bundle) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in judge(bundle).report.findings:
        out.setdefault(f.rule, []).append(f)
    return out


# --- epochs and loaders end their workers ------------------------------------------------------------


def test_workers_replaced_by_a_new_generation_every_epoch_did_not_die():
    # GIVEN 10 epochs, each forking 2 new workers per rank (the old ones seen gone 1.8 s after the
    # next epoch's workers started), the ranks waiting on their DataLoader at the last sample
    bundle = epochs_job()
    # WHEN the report is built
    report = judge(bundle).report
    found = {f.rule for f in report.findings}
    # THEN no worker died, and each rank's rows are its 2 live workers; the 18 others are a count
    # (every sample finds the ranks waiting on their data: the job is slow, data-bound, not broken)
    assert report.verdict == "slow" and report.culprit_ranks == ()
    assert "worker-died" not in found
    for rank in report.ranks:
        assert [(w.index, w.state, w.alive) for w in rank.workers] == [(0, "idle", True), (1, "idle", True)]
        assert rank.retired_workers == 18


def test_gpu_starved_counts_the_workers_each_rank_has_now():
    # GIVEN the same job (its ranks wait on data in every sample: starved)
    [starved] = rules(epochs_job())["gpu-starved"]
    # THEN it counts the 2 live workers per rank, not the 20 each rank forked over 10 epochs
    assert "2 DataLoader workers per rank x 2 ranks = 4 workers on a 2-core host" in starved.evidence
    assert sum("% of a core busy" in e for e in starved.evidence) == 4
    assert "2 workers per rank" in starved.fix


def test_a_validation_loaders_workers_end_with_their_pass():
    # GIVEN a training loader whose workers live on, and a validation loader's 2 workers forked
    # mid-epoch and ended 3 s later; the ranks then wait on their training data without stepping
    bundle = epochs_job(epochs=1, epoch_s=20.0, validation=T0 + 8.1, stop_stepping_at=T0 + 11.5)
    # THEN they retired with their loader: no death, no row
    report = judge(bundle).report
    assert "worker-died" not in {f.rule for f in report.findings}
    assert all(len(r.workers) == 2 and r.retired_workers == 2 for r in report.ranks)
    fates = worker_fates(bundle)
    ended = [w for rank in fates.values() for w in rank.retired]
    assert {w.why for w in ended} == {"ended with the 1 other worker(s) of its generation"}


def test_the_fate_of_each_epochs_workers_names_the_sign_that_decided_it():
    # GIVEN the 10-epoch job WHEN the fates are read
    fates = worker_fates(epochs_job())
    rank0 = fates[100]
    # THEN ten generations of two, the newest live, the others retired because newer workers came
    assert [w.generation for w in rank0.workers] == [g for g in range(10) for _ in range(2)]
    assert [w.pid for w in rank0.live] == [119, 120]
    assert {w.why for w in rank0.retired} == {"a newer worker of its rank was forked after it"}
    assert rank0.dead == ()


# --- a death is still a death ---------------------------------------------------------------------------


def test_a_lone_worker_killed_while_its_sibling_lives_and_its_rank_waits_died():
    # GIVEN rank 1's worker 0 gone alone at +5 s of its epoch (its sibling runs on), no log line,
    # and the ranks stuck waiting on their DataLoader since
    bundle = epochs_job(epochs=1, epoch_s=20.0, kill=(1, 0, T0 + 5.0), stop_stepping_at=T0 + 5.0)
    # WHEN the report is built
    report = judge(bundle).report
    [died] = [f for f in report.findings if f.rule == "worker-died"]
    # THEN worker-died names it, and the report shows it among rank 1's workers
    assert died.ranks == (1,) and "DataLoader worker 0 (pid 1101) of rank 1 vanished" in died.title
    assert any("unreplaced, while its rank waits for data" in e for e in died.evidence)
    rank1 = next(r for r in report.ranks if r.rank == 1)
    assert [(w.index, w.alive) for w in rank1.workers] == [(0, False), (1, True)]
    assert rank1.retired_workers == 0


def test_a_lone_worker_gone_while_its_rank_still_steps_did_not_die():
    # GIVEN the same disappearance, but the ranks keep stepping after it (the loop got its data)
    bundle = epochs_job(epochs=1, epoch_s=20.0, kill=(1, 0, T0 + 5.0))
    # THEN it is not a death
    assert "worker-died" not in rules(bundle)
    assert worker_fates(bundle)[1100].retired[0].why == "its rank stepped after it was gone"


def test_pytorchs_log_line_makes_a_death_whatever_else_the_bundle_shows():
    # GIVEN a generation that ended together, and a log line saying one of them was killed
    bundle = epochs_job(epochs=2)
    line = "[rank0]: RuntimeError: DataLoader worker (pid 101) is killed by signal: Killed."
    bundle = dataclasses.replace(bundle, logs=(LogTail("/tmp/job.log", (line,)),))
    # THEN that worker died (and only it)
    assert [f.title for f in rules(bundle)["worker-died"]] == [
        "DataLoader worker 0 (pid 101) of rank 0 was killed by signal: Killed"]


def test_an_exit_record_tells_a_retirement_from_a_kill():
    # GIVEN exit records (when the capture read them): one worker exited 0, one was SIGKILLed
    import hangdoc.model

    ProcessExit = getattr(hangdoc.model, "ProcessExit", None)
    if ProcessExit is None:
        pytest.skip("this tree's bundles carry no exit records")
    bundle = epochs_job(epochs=2)
    exits = (ProcessExit(101, T0 + 6.2, code=0, source="zombie"),
             ProcessExit(102, T0 + 6.2, signal=9, source="zombie"))
    fates = worker_fates(dataclasses.replace(bundle, exits=exits))[100]
    # THEN the first is retired by its status, the second died of its signal
    by_pid = {w.pid: w for w in fates.workers}
    assert (by_pid[101].fate, by_pid[101].why) == (Fate.RETIRED, "exited with status 0")
    assert (by_pid[102].fate, by_pid[102].how) == (Fate.DEAD, "Killed")


# --- a worker's own dying line (PyTorch's worker signal handler: no pid, no rank) -------------------

DYING = "ERROR: Unexpected segmentation fault encountered in worker."
# Rank 1's traceback as torchrun's excepthook prints it after the worker's line: the worker's write
# ends with its C string's NUL, which lands before the rank's first line.
HANDOFF = ("\x00[rank1]: Traceback (most recent call last):",
           '[rank1]:   File "/src/train.py", line 404, in main',
           "[rank1]:     for feats, labels in loader:",
           '[rank1]:   File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1291, in _try_get_data',
           '[rank1]:   File "/usr/lib/python3.11/multiprocessing/connection.py", line 395, in _recv',
           "[rank1]:     chunk = read(handle, remaining)",
           "[rank1]: ConnectionResetError: [Errno 104] Connection reset by peer")


def with_output(bundle: Bundle, *lines: str) -> Bundle:
    return dataclasses.replace(bundle, logs=(LogTail("<output of the command>", lines),))


def test_a_worker_that_went_first_died_of_the_signal_its_own_line_names():
    # GIVEN rank 1's worker 0 gone alone (its sibling lives, its rank waits for data), and the
    # worker's own dying line in the output, no rank's "is killed by signal" line
    bundle = with_output(epochs_job(epochs=1, epoch_s=20.0, kill=(1, 0, T0 + 5.0), stop_stepping_at=T0 + 5.0),
                         DYING)
    # WHEN the report is built
    [died] = rules(bundle)["worker-died"]
    # THEN that worker died of a segmentation fault, and the line says so
    assert died.title == "DataLoader worker 0 (pid 1101) of rank 1 was killed by signal: Segmentation fault"
    assert DYING in died.evidence
    assert "spawn" in died.fix


def test_a_dying_line_its_rank_named_the_worker_for_is_one_death_not_two():
    # GIVEN a worker's dying line and the rank's own line naming that worker and the same signal
    bundle = with_output(epochs_job(epochs=2), DYING,
                         "[rank0]: RuntimeError: DataLoader worker (pid 101) is killed by signal: Segmentation fault.")
    # THEN one worker died: the one the rank named
    assert [f.title for f in rules(bundle)["worker-died"]] == [
        "DataLoader worker 0 (pid 101) of rank 0 was killed by signal: Segmentation fault"]


def test_a_dying_line_no_worker_and_no_rank_pairs_with_names_nobody():
    # GIVEN workers that all ended with their epoch, and a dying line: which of them, or whose, is not told
    bundle = with_output(epochs_job(epochs=2), DYING)
    # THEN no worker is said to have died
    assert "worker-died" not in rules(bundle)
    assert not any(w.fate is Fate.DEAD for rank in worker_fates(bundle).values() for w in rank.workers)


def test_a_worker_no_sample_saw_is_named_by_its_line_and_its_ranks_failure_in_the_loader():
    # GIVEN no worker of rank 1 ever sampled (it died before the watch found it), its dying line,
    # and rank 1's traceback raised in its DataLoader's iterator (a batch cut off mid-handoff)
    bundle = with_output(epochs_job(epochs=1, epoch_s=20.0, workers=0), DYING, *HANDOFF)
    # WHEN the report is built
    [died] = rules(bundle)["worker-died"]
    # THEN a worker of rank 1 died of a segmentation fault, and the rank's failure is its consequence
    assert died.ranks == (1,)
    assert died.title == "A DataLoader worker of rank 1 was killed by signal: Segmentation fault"
    assert any("no sample saw the worker" in e for e in died.evidence)
    assert any(e.startswith("rank 1 then failed in its DataLoader's iterator: ConnectionResetError") for e in died.evidence)


def test_a_worker_found_only_gone_counts_as_unseen():
    # GIVEN rank 1's only worker in the bundle first found already gone (a zombie of its loader's
    # shutdown), its dying-worker line, and rank 1's traceback raised in its DataLoader's iterator
    bundle = epochs_job(epochs=1, epoch_s=20.0, workers=0)
    rank1 = next(p for p in bundle.job.ranks if p.rank == 1)
    found = ProcessInfo(1199, rank1.pid, Role.WORKER, rank1.cmdline, None, T0 + 5.0, rank1.env, 1, 1, 0, 2,
                        rank1.pid, 1, 2, "fork")
    samples = tuple(dataclasses.replace(snap, processes=snap.processes + (_gone(1199),)) if snap.time >= T0 + 6.0
                    else snap for snap in bundle.samples)
    bundle = dataclasses.replace(bundle, samples=samples,
                                 job=dataclasses.replace(bundle.job, processes=bundle.job.processes + (found,)))
    bundle = with_output(bundle, DYING, *HANDOFF)
    # WHEN the report is built
    [died] = rules(bundle)["worker-died"]
    # THEN the dead worker is one no sample saw alive, of rank 1
    assert died.title == "A DataLoader worker of rank 1 was killed by signal: Segmentation fault"
    assert any("no sample saw the worker alive" in e for e in died.evidence), died.evidence


def test_workers_gone_at_one_sample_are_named_as_those_the_dying_worker_is_one_of():
    # GIVEN both of rank 1's workers first seen gone at one sample (+6 s), its dying-worker line, and
    # rank 1's traceback raised in its DataLoader's iterator
    bundle = epochs_job(epochs=1, epoch_s=20.0, kill=(1, 0, T0 + 5.0), stop_stepping_at=T0 + 5.0)
    samples = tuple(dataclasses.replace(snap, processes=tuple(_gone(1102) if p.pid == 1102 and snap.time >= T0 + 5.0
                                                              else p for p in snap.processes))
                    for snap in bundle.samples)
    bundle = with_output(dataclasses.replace(bundle, samples=samples), DYING, *HANDOFF)
    # WHEN the report is built
    [died] = rules(bundle)["worker-died"]
    # THEN a worker of rank 1 died of a segmentation fault, one of the two: no coin toss between them
    assert died.title == "A DataLoader worker of rank 1 was killed by signal: Segmentation fault"
    assert any("which of its workers, the samples cannot tell: pids 1101, 1102 were all first seen gone at +6.0 s"
               in e for e in died.evidence), died.evidence


def test_a_dying_line_with_no_rank_failing_in_its_loader_names_nobody():
    # GIVEN the dying line, no worker sampled, and no rank's traceback through a DataLoader
    bundle = with_output(epochs_job(epochs=1, epoch_s=20.0, workers=0), DYING,
                         "[rank1]: Traceback (most recent call last):", "[rank1]: ValueError: bad shard")
    # THEN nobody is named
    assert "worker-died" not in rules(bundle)


# --- what the user watches --------------------------------------------------------------------------


def test_the_live_view_of_2_ranks_after_10_epochs_fits_an_80x24_terminal(monkeypatch):
    # GIVEN the 10-epoch job (2 ranks x 2 workers, 40 workers forked in all) on an 80x24 terminal
    monkeypatch.setenv("NO_COLOR", "1")
    report = judge(epochs_job()).report
    out = io.StringIO()
    make_console(out, 80, terminal=True).print(live_table(report, 80, now="12:00:00"))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    # THEN both ranks show with their 2 live workers each, and nothing else; every sample finds
    # them waiting on their data, so the job is slow, data-bound, and each row says how much; the
    # header keeps the clock now that the pace no longer calls a gap between samples a step, and
    # a frame gives up the middle of its name before file:line
    assert lines == [
        "hangdoc watching 2 ranks · sample 30 · 12:00:00 · quiet 0 s of 10 s (learned)",
        "RANK  STATE            FOR  PROGRESS   TOP FRAME",
        "0     dataloader-wait  58s  data 100%  _MultiPr…_get_data (…/dataloader.py:1251)",
        " w0   idle                             Queue.get (multiprocessing/queues.py:113)",
        " w1   idle                             Queue.get (multiprocessing/queues.py:113)",
        "1     dataloader-wait  58s  data 100%  _MultiPr…_get_data (…/dataloader.py:1251)",
        " w0   idle                             Queue.get (multiprocessing/queues.py:113)",
        " w1   idle                             Queue.get (multiprocessing/queues.py:113)",
    ]
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
