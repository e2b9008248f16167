"""Launchers that name no rank in any environment, and a launcher that restarts its ranks: on a fake
/proc tree, fake py-spy dumps and hand-made bundles."""
from __future__ import annotations

import dataclasses

import pytest
from test_merge_jobs import FakeProc

from hangdoc.analyze.restarts import restarts_of
from hangdoc.base.errors import NotDistributed
from hangdoc.collect.discover import find_job
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.spawned import RankClue, clue_from_dump, is_worker
from hangdoc.model import Bundle, Host, Job, Options, ProcessExit, ProcessInfo, ProcSample, Role, Snapshot
from hangdoc.model.capture import GpuState

SCRIPT = ("/usr/bin/python3", "train.py")
SPAWNED = ("/usr/bin/python3", "-B", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=4, "
           "pipe_handle=7)", "--multiprocessing-fork")
TRACKER = ("/usr/bin/python3", "-B", "-c", "from multiprocessing.resource_tracker import main;main(3)")


def frame(name: str, filename: str, **values: str) -> dict:
    return {"name": name, "filename": filename, "short_filename": filename, "line": 1,
            "locals": [{"name": k, "repr": v, "arg": True} for k, v in values.items()]}


def dump(*frames: dict) -> list[dict]:
    return [{"thread_name": "MainThread", "os_thread_id": 1, "frames": list(frames)}]


def test_the_rank_is_read_from_init_process_group_then_the_jobs_own_argument_then_spawns_index():
    # GIVEN the stacks of spawned ranks: in init_process_group; training in main(rank, world_size); only spawn's _wrap
    init = dump(frame("init_process_group", "torch/distributed/distributed_c10d.py", rank="1", world_size="2",
                      init_method='"tcp://10.0.0.1:29500"'),
                frame("main", "train.py", rank="1", world_size="2"),
                frame("_wrap", "torch/multiprocessing/spawn.py", i="1"))
    training = dump(frame("forward", "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"),
                    frame("main", "train.py", rank="3", world_size="4"),
                    frame("_wrap", "torch/multiprocessing/spawn.py", i="1"))
    bare = dump(frame("step", "train.py"), frame("_wrap", "torch/multiprocessing/spawn.py", i="2"))
    worker = dump(frame("_worker_loop", "torch/utils/data/_utils/worker.py"), frame("main", "train.py", rank="1"))
    # WHEN their ranks are read
    # THEN each says its rank and where it came from; a DataLoader worker is no rank
    assert clue_from_dump(init) == RankClue(1, 2, "init_process_group(rank=1) in its stack", "10.0.0.1", 29500)
    assert clue_from_dump(training) == RankClue(3, 4, "the argument rank=3 of main() in its stack")
    assert clue_from_dump(bare).rank == 2 and "process index" in clue_from_dump(bare).source
    assert is_worker(clue_from_dump(worker))
    assert clue_from_dump(dump(frame("<module>", "train.py"))) is None


@pytest.fixture
def spawn_job(tmp_path):
    # GIVEN `python train.py` whose mp.spawn started two ranks (no RANK anywhere), each with a DataLoader worker
    proc = FakeProc(tmp_path)
    proc.add(100, 1, SCRIPT)
    proc.add(101, 100, TRACKER)
    for rank, pid in enumerate((110, 120)):
        proc.add(pid, 100, SPAWNED)
        proc.add(pid + 1, pid, SPAWNED)          # its forked worker: the same command line
    stacks = {110: RankClue(0, 2, "the argument rank=0 of main() in its stack"),
              120: RankClue(1, 2, "the argument rank=1 of main() in its stack"),
              111: clue_from_dump(dump(frame("_worker_loop", "torch/utils/data/_utils/worker.py"))),
              121: clue_from_dump(dump(frame("_worker_loop", "torch/utils/data/_utils/worker.py")))}
    return ProcFS(tmp_path), lambda pid, start=None: stacks.get(pid)


@pytest.mark.parametrize("pid", [100, 120, 121], ids=["launcher", "rank", "worker"])
def test_an_mp_spawn_job_is_found_from_any_of_its_pids(spawn_job, pid):
    procfs, stacks = spawn_job
    # WHEN the job is looked for from the launcher's, a rank's or a worker's pid
    job = find_job(pid, procfs, stack_ranks=stacks)
    # THEN the script is the launcher, its spawned children the ranks (read from their stacks), their children workers
    assert job.launcher_pid == 100 and job.world_size == 2
    assert [(r.pid, r.rank, r.rank_source) for r in job.ranks] == [
        (110, 0, "the argument rank=0 of main() in its stack"), (120, 1, "the argument rank=1 of main() in its stack")]
    assert {p.pid for p in job.by_role(Role.WORKER)} == {111, 121}
    assert 101 not in {p.pid for p in job.processes}


def test_a_spawned_rank_whose_stack_cannot_be_read_takes_the_rank_its_siblings_leave(spawn_job):
    # GIVEN the mp.spawn job whose rank 1 is stopped (SIGSTOP): its stack cannot be read
    procfs, stacks = spawn_job
    # WHEN the job is looked for from the stopped rank's pid
    job = find_job(120, procfs, stack_ranks=lambda pid, start=None: None if pid == 120 else stacks(pid))
    # THEN it is rank 1, the rank rank 0's world size of 2 leaves, and the report can say so
    assert [(r.pid, r.rank) for r in job.ranks] == [(110, 0), (120, 1)]
    assert "unclaimed" in job.ranks[1].rank_source


def test_a_python_process_with_dataloader_workers_alone_is_no_job(tmp_path):
    # GIVEN a single-process training whose DataLoader workers are its multiprocessing children
    proc = FakeProc(tmp_path)
    proc.add(200, 1, SCRIPT)
    proc.add(201, 200, SCRIPT)
    worker = clue_from_dump(dump(frame("_worker_loop", "torch/utils/data/_utils/worker.py")))
    # WHEN hangdoc looks for its job THEN the one-line refusal, as before
    with pytest.raises(NotDistributed):
        find_job(200, ProcFS(tmp_path), stack_ranks=lambda pid, start=None: worker)


@pytest.mark.parametrize("pid", [300, 310], ids=["script", "rank 1"])
def test_lightnings_own_launcher_makes_the_script_rank_0(tmp_path, pid):
    # GIVEN `python train.py` with Trainer(devices=2, strategy="ddp"): the script started rank 1 again
    # with LOCAL_RANK / NODE_RANK / WORLD_SIZE (no RANK); its own environment names nothing
    proc = FakeProc(tmp_path)
    proc.add(300, 1, SCRIPT)
    proc.add(310, 300, ("/usr/bin/python3", "/home/u/train.py"),
             {"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "40000"})
    # WHEN the job is looked for from the script's pid or rank 1's
    job = find_job(pid, ProcFS(tmp_path), stack_ranks=lambda pid, start=None: None)
    # THEN the script is rank 0, and says why; rank 1 is named by Lightning's variables
    assert [(r.pid, r.rank) for r in job.ranks] == [(300, 0), (310, 1)]
    assert "Lightning" in job.ranks[0].rank_source and "LOCAL_RANK" in job.ranks[1].rank_source
    assert job.launcher_pid is None and job.world_size == 2


def _restarted_bundle(second_start_failed: bool, launcher_alive: bool = True) -> Bundle:
    """torchrun (pid 10) with --max-restarts=1: ranks 11/12 (start 0), rank 1 failed; ranks 21/22 (start 1)."""
    def rank(pid: int, rank: int, start: int) -> ProcessInfo:
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": str(start),
               "TORCHELASTIC_MAX_RESTARTS": "1"}
        return ProcessInfo(pid=pid, ppid=10, role=Role.RANK, cmdline=("python", "train.py"), exe=None,
                           start_time=100.0 + 10 * start, env=env, rank=rank, world_size=2)
    procs = (ProcessInfo(pid=10, ppid=1, role=Role.LAUNCHER, cmdline=("torchrun",), exe=None, start_time=90.0),
             rank(11, 0, 0), rank(12, 1, 0), rank(21, 0, 1), rank(22, 1, 1))
    exits = [ProcessExit(12, 105.0, code=1, source="zombie"), ProcessExit(11, 105.2, signal=15, source="zombie")]
    if second_start_failed:
        exits += [ProcessExit(22, 115.0, code=1, source="zombie"), ProcessExit(21, 115.1, signal=15, source="zombie")]
    alive = {10: launcher_alive, 11: False, 12: False, 21: not second_start_failed, 22: not second_start_failed}
    sample = Snapshot(116.0, 0.1, tuple(ProcSample(pid, a) for pid, a in alive.items()), GpuState("unavailable"))
    host = Host("node", "x86_64", "6.1", 2, "3.11", "2.13")
    return Bundle("hangdoc/bundle-v1", "0", 116.0, host, Job(None, None, None, 2, 10, procs), (sample,),
                  options=Options(), exits=tuple(exits))


def test_a_restarted_job_is_judged_by_its_newest_start_and_remembers_the_first_failure():
    # GIVEN a job whose first start failed (rank 1 exited 1) and whose restart runs
    bundle = _restarted_bundle(second_start_failed=False)
    # WHEN its ranks and restarts are read
    restarts = restarts_of(bundle)
    # THEN the job's ranks are the newest start's; the first failure is rank 1's, restart 1 of 1, none pending
    assert [p.pid for p in bundle.job.ranks] == [21, 22] and len(bundle.job.all_ranks) == 4
    assert (restarts.generation, restarts.max_restarts, restarts.left) == (1, 1, 0)
    assert (restarts.first.rank, restarts.first.code, restarts.first.generation) == (1, 1, 0)
    assert not restarts.pending and not restarts.used_up


def test_a_failure_with_restarts_left_is_pending_and_one_without_is_the_crash():
    # GIVEN the first start failed while the launcher lives (restarts left), or the second start failed too
    first = dataclasses.replace(_restarted_bundle(False), job=dataclasses.replace(
        _restarted_bundle(False).job, processes=_restarted_bundle(False).job.processes[:3]))
    both = _restarted_bundle(second_start_failed=True)
    # THEN the first is a restart under way; the second has used its restarts up, first failure rank 1's
    assert restarts_of(first).pending and not restarts_of(first).used_up
    assert restarts_of(both).used_up and restarts_of(both).first.rank == 1 and restarts_of(both).first.time == 105.0
