"""Ranks that wait in init_process_group for a rank that never comes, and poll loops read as waits.

The stacks are hand-made py-spy dumps (`--json --locals`) of what a real 3-rank gloo job shows
(tests/jobs/rendezvous_job.py): ranks 0 and 2 parked in `init_process_group` ->
`_new_process_group_helper` (gloo's connect waits on the store), rank 1 asleep in `time.sleep`
inside a retry loop around a stale lock file, its `attempts` local growing every sample.
"""
from __future__ import annotations

import dataclasses

from factories import node_bundle, save_node
from hangdoc.analyze.diagnose import JobFacts, decide, diagnose
from hangdoc.analyze.rendezvous import absent_ranks, not_joined, setup_frame
from hangdoc.collect.stacks import parse_dump
from hangdoc.inputs.fold import FOLD_ABOVE_RANKS
from hangdoc.inputs.evidence import report_from_files
from hangdoc.model import (BUNDLE_SCHEMA, Bundle, Frame, GpuState, Host, IoCounters, Job, Options, ProcessInfo,
                           ProcSample, ProcStat, RankDigest, Role, Snapshot, Stack, StepSummary, Thread,
                           ThreadCounters)
from hangdoc.report import judge

SITE = "/opt/venv/lib/python3.11/site-packages/"
C10D = SITE + "torch/distributed/distributed_c10d.py"
TRAIN = "/home/user/asr/train.py"
CACHE = "/home/user/asr/cache.py"
T0 = 1_700_000_000.0


def pyframe(name, filename, line, locals_=None):
    short = filename.split("site-packages/")[-1] if "site-packages/" in filename else filename.rsplit("/", 1)[-1]
    frame = {"name": name, "filename": filename, "short_filename": short, "line": line}
    if locals_ is not None:
        frame["locals"] = [{"name": k, "addr": addr, "arg": False, "repr": r} for k, (addr, r) in locals_.items()]
    return frame


def main_frame(line, rank):
    return pyframe("main", TRAIN, line, {"rank": (0x10, str(rank)), "args": (0x11, "<Namespace>")})


def in_init(rank):
    """Waiting in init_process_group: gloo connects to every peer through the store."""
    return [pyframe("_new_process_group_helper", C10D, 2169, {"backend": (0x50, '"gloo"')}),
            pyframe("init_process_group", C10D, 1899, {"world_size": (0x51, "3")}),
            pyframe("_time_logger.<locals>.wrapper", SITE + "torch/distributed/c10d_logger.py", 97, {}),
            pyframe("_exception_logger.<locals>.wrapper", SITE + "torch/distributed/c10d_logger.py", 83, {}),
            main_frame(38, rank), pyframe("<module>", TRAIN, 48, {})]


def polling_lock(attempts):
    """A retry loop around a stale lock file: `attempts += 1; time.sleep(0.2)` (time.sleep is C)."""
    return [pyframe("acquire_lock", CACHE, 25, {"path": (0x60, '"/data/cache.lock"'), "poll_s": (0x61, "0.2"),
                                                "attempts": (0x62, str(attempts))}),
            main_frame(34, 1), pyframe("<module>", TRAIN, 48, {})]


def dump(frames, active=False):
    raw = [{"pid": 1, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 1,
            "active": active, "owns_gil": False, "frames": frames}]
    return parse_dump(raw, loop_locals=True).stack


def proc(cpu, wchan):
    return ProcStat(state="S", wchan=wchan, syscall=None, utime_s=cpu, stime_s=0.0, rss_bytes=1 << 30,
                    num_threads=8, io=IoCounters(1000, 1000, 0, 0, 10, 10),
                    main_thread=ThreadCounters(cpu_s=cpu, voluntary_switches=7, involuntary_switches=3))


def job_bundle(rows, ranks, world=3, interval=2.0, hang_after=None) -> Bundle:
    """rows: one dict per sample, rank -> (frames, wchan); `ranks`: the ranks whose process exists."""
    infos = tuple(ProcessInfo(pid=100 + r, ppid=1, role=Role.RANK, cmdline=("python", "train.py"), exe=None,
                              start_time=0.0, env={"WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world)},
                              rank=r, local_rank=r, group_rank=0, world_size=world, rank_pid=100 + r)
                  for r in ranks)
    samples = []
    for i, row in enumerate(rows):
        procs = tuple(ProcSample(pid=100 + r, alive=True, proc=proc(1.0 + 0.001 * i, wchan), stack=dump(frames))
                      for r, (frames, wchan) in row.items())
        samples.append(Snapshot(time=T0 + i * interval, took_s=0.05, processes=procs,
                                gpu=GpuState(status="unavailable", reason="test")))
    return Bundle(schema=BUNDLE_SCHEMA, hangdoc_version="0", created=1.0,
                  host=Host("vm", "x86_64", "6.1", 2, "3.11", "2.13.0"),
                  job=Job(run_id="r", master_addr="127.0.0.1", master_port=29500, world_size=world,
                          launcher_pid=1, processes=infos),
                  samples=tuple(samples), options=Options(interval_s=interval, hang_after_s=hang_after))


def lock_job(samples, hang_after=None):
    """GIVEN ranks 0 and 2 in init_process_group and rank 1 polling a stale lock, for `samples` samples."""
    rows = [{0: (in_init(0), "poll_schedule_timeout.constprop.0"), 1: (polling_lock(10 * i), "hrtimer_nanosleep"),
             2: (in_init(2), "poll_schedule_timeout.constprop.0")} for i in range(samples)]
    return job_bundle(rows, ranks=(0, 1, 2), hang_after=hang_after)


def test_ranks_in_init_process_group_past_the_threshold_wait_for_the_rank_in_a_poll_loop():
    # GIVEN 18 s of ranks 0 and 2 in init_process_group while rank 1 polls a lock (attempts 0 -> 90)
    bundle = lock_job(10)
    # WHEN diagnosed with --hang-after 10
    report = judge(bundle, hang_after=10.0).report
    # THEN a hang, rank 1 the culprit; it never stepped, and the others read as waiting in init
    assert report.verdict == "hang" and report.culprit_ranks == (1,)
    assert report.threshold.steps_seen == 0
    rows = {r.rank: r for r in report.ranks}
    assert rows[1].state == "idle" and rows[1].progress == "stuck"
    assert rows[1].top_frame == "acquire_lock (cache.py:25)"
    assert rows[0].top_frame == "init_process_group (torch/distributed/distributed_c10d.py:1899)"
    # AND the finding names rank 1, its own line, the poll's wait, what the others wait in, and a fix
    found = [f for f in report.findings if f.rule == "missing-ranks"]
    assert len(found) == 1 and found[0].ranks == (1,) and found[0].severity == "critical"
    f = found[0]
    assert f.title == ("Rank 1 never reached init_process_group: ranks 0,2 wait there for it "
                       "while it is at acquire_lock (cache.py:25)")
    said = "\n".join(f.evidence)
    assert "ranks 0,2 wait in init_process_group (torch/distributed/distributed_c10d.py:1899)" in said
    assert "called from main (train.py:38)" in said and "all 3 ranks" in said
    assert "asleep in time.sleep between tries, its `attempts` went 0 -> 90" in said
    assert "stale lock" in f.fix and "timeout" in f.fix
    assert not {"collective-straggler", "no-progress"} & {x.rule for x in report.findings}


def test_without_a_threshold_the_split_is_suspect_first_and_a_hang_after_the_default():
    # GIVEN the same job watched for 30 s, then for 62 s, no step ever seen
    # THEN suspect (a third of the 60 s default) naming rank 1, then a hang
    suspect = judge(lock_job(16)).report
    assert suspect.verdict == "suspect" and suspect.culprit_ranks == (1,)
    assert suspect.threshold.source == "default"
    assert judge(lock_job(32)).report.verdict == "hang"


def test_every_rank_in_init_process_group_is_a_job_starting_not_a_culprit():
    # GIVEN every rank in init_process_group (all three joined; the connect is under way)
    rows = [{r: (in_init(r), "poll_schedule_timeout") for r in range(3)} for _ in range(4)]
    report = judge(job_bundle(rows, ranks=(0, 1, 2))).report
    # THEN healthy: nobody is missing
    assert report.verdict == "healthy" and report.culprit_ranks == ()
    assert not [f for f in report.findings if f.rule == "missing-ranks"]


def test_a_rank_with_no_process_is_the_one_the_others_wait_for():
    # GIVEN a 3-rank node (LOCAL_WORLD_SIZE=3) where only ranks 0 and 2 run, both in init_process_group
    rows = [{0: (in_init(0), "poll_schedule_timeout"), 2: (in_init(2), "poll_schedule_timeout")} for _ in range(8)]
    report = judge(job_bundle(rows, ranks=(0, 2)), hang_after=10.0).report
    # THEN a hang with rank 1 named as the culprit, and why: no process of it
    assert report.verdict == "hang" and report.culprit_ranks == (1,)
    titles = [f.title for f in report.findings if f.rule == "missing-ranks" and f.severity == "critical"]
    assert titles == ["Rank 1 has no process: ranks 0,2 wait for it in init_process_group"]


def test_the_setup_frame_is_the_outermost_torch_distributed_setup_call():
    frames = dump(in_init(0)).main.frames
    assert setup_frame(frames).name == "init_process_group"
    assert setup_frame(dump(polling_lock(3)).main.frames) is None
    # a function of the job's own called "rendezvous" is not torch's
    mine = dump([pyframe("rendezvous", TRAIN, 5, {}), main_frame(38, 0)]).main.frames
    assert setup_frame(mine) is None
    native = (Frame("c10d::TCPStore::doWait", "libtorch_cpu.so", "libtorch_cpu.so", 0, native=True),)
    assert setup_frame(native).native


def digest(rank, state, joining=None, local_rank=None, local_world=None, world=None):
    return RankDigest(rank=rank, pid=100 + rank, host="vm", group_rank=0, state=state, detail=None, top_frame=None,
                      stack_key=state, state_since=T0, blocked_since=None, exited_at=None, progress="stuck",
                      rhythm=StepSummary(0, None, None, True), unmoved_since=None, points=10, joining=joining,
                      world_size=world, local_rank=local_rank, local_world_size=local_world)


def test_the_decision_over_digests_names_who_never_joined():
    # GIVEN the digests of a node: ranks 0 and 2 joining, rank 1 idle elsewhere, quiet for 20 s
    ranks = [digest(0, "idle", "init_process_group"), digest(1, "idle"), digest(2, "idle", "init_process_group")]
    facts = JobFacts(first=T0, now=T0 + 20, logs=(), exit_code=None, hang_after=10.0)
    # THEN a hang with rank 1 as the culprit
    decision = decide(ranks, facts)
    assert decision.verdict == "hang" and decision.culprits == (1,)
    # AND the ranks absent from a captured node are named; those of a node not captured are not
    node0 = [digest(0, "idle", "init_process_group", 0, 2, 4), digest(1, "idle", "init_process_group", 1, 2, 4)]
    assert absent_ranks(node0) == () and not_joined(node0) == ()
    gap = [digest(4, "idle", "init_process_group", 0, 4, 8), digest(6, "idle", "init_process_group", 2, 4, 8)]
    assert absent_ranks(gap) == (5, 7) and not_joined(gap) == (5, 7)


def test_a_poll_loop_beside_ranks_in_a_collective_is_the_straggler():
    # GIVEN rank 0 waiting in all_reduce (no step) while rank 1 polls a lock in a hook of its step
    all_reduce = [pyframe("all_reduce", C10D, 2806, {}), main_frame(60, 0), pyframe("<module>", TRAIN, 48, {})]
    rows = [{0: (all_reduce, "poll_schedule_timeout"), 1: (polling_lock(10 * i), "hrtimer_nanosleep")}
            for i in range(8)]
    report = judge(job_bundle(rows, ranks=(0, 1), world=2), hang_after=10.0).report
    # THEN a hang naming rank 1, read as a poll loop, not as stepping
    assert report.verdict == "hang" and report.culprit_ranks == (1,)
    views = {v.info.rank: v for v in diagnose(job_bundle(rows, ranks=(0, 1), world=2), 10.0).ranks}
    assert views[1].reading.detail == "a poll loop (time.sleep)"
    assert views[1].poll.counter == "attempts" and views[1].poll.tries == (0, 70)


def rendezvous_node(node, nodes, culprit):
    """One node of a job in init_process_group, rank `culprit` elsewhere (idle in its own code)."""
    bundle = node_bundle(node, nodes, culprit, T0, workers=0)
    init = tuple(Frame(f["name"], f["filename"], f["short_filename"], f["line"]) for f in in_init(0))
    away = (Frame("download_shards", TRAIN, "train.py", 77), Frame("main", TRAIN, "train.py", 30))

    def edit(sample):
        info = bundle.job.info(sample.pid)
        if sample.stack is None or info is None or info.role is not Role.RANK:
            return sample
        frames = away if info.rank == culprit else init
        return dataclasses.replace(sample, stack=Stack((Thread(sample.pid, "MainThread", False, False, frames),)))

    snaps = tuple(dataclasses.replace(s, processes=tuple(edit(p) for p in s.processes)) for s in bundle.samples)
    return dataclasses.replace(bundle, samples=snaps)


def test_a_job_of_many_nodes_decides_the_same_by_class_as_merged_whole(tmp_path):
    # GIVEN 16 nodes x 8 ranks in init_process_group, rank 77 elsewhere, each node saved with its digest
    nodes = 16
    assert nodes * 8 > FOLD_ABOVE_RANKS
    for n in range(nodes):
        save_node(rendezvous_node(n, nodes, 77), tmp_path / f"node{n:02d}.json.zst")
    # WHEN `hangdoc report DIR` reads the digests (by class)
    _, folded = report_from_files([tmp_path])
    folded = folded.report
    # THEN the hang names rank 77, with the finding about it
    assert folded.verdict == "hang" and folded.culprit_ranks == (77,)
    found = [f for f in folded.findings if f.rule == "missing-ranks" and f.ranks == (77,)]
    assert found and "never reached init_process_group" in found[0].title
    assert "download_shards (train.py:77)" in found[0].title
    assert "downloads" in found[0].fix


def test_every_captured_rank_in_init_process_group_on_a_partial_capture_points_at_the_other_nodes():
    # GIVEN node 0 of a 2-node job (LOCAL_WORLD_SIZE=2, WORLD_SIZE=4): both its ranks in init_process_group
    rows = [{r: (in_init(r), "poll_schedule_timeout") for r in (0, 1)} for _ in range(8)]
    bundle = job_bundle(rows, ranks=(0, 1), world=4)
    infos = tuple(dataclasses.replace(p, env={"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "2"})
                  for p in bundle.job.processes)
    bundle = dataclasses.replace(bundle, job=dataclasses.replace(bundle.job, processes=infos))
    # WHEN diagnosed past the threshold
    report = judge(bundle, hang_after=10.0).report
    # THEN a hang whose culprit is not here: ranks 2-3 are named as not captured, none as a culprit
    assert report.verdict == "hang" and report.culprit_ranks == ()
    found = next(f for f in report.findings if f.rule == "missing-ranks")
    assert found.ranks == (2, 3)
    assert found.title.endswith("every rank here waits in init_process_group, so the ranks it waits for are "
                                "on another node")
