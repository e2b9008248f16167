"""A moving job is never hung: every witness of progress, where the loop's counters cannot be read.

py-spy reads no locals of a `<module>` frame, so a training loop written at module level (as many
research scripts are) has no counter to read. The other witnesses stand in: the stack going round
the loop, a waiting rank's main thread waking, bytes it moves. Each test here fails without its
witness; each has the hang beside it that the same witness must not hide.
"""
from __future__ import annotations

import dataclasses

import pytest

from hangdoc.analyze.classify import WORK_WAIT, place
from hangdoc.analyze.logs import output_step, output_steps
from hangdoc.analyze.progress import DEFAULT_HANG_AFTER_S, HANG_FLOOR_S, region
from hangdoc.analyze.timeline import timelines
from hangdoc.analyze.witnesses import job_witnesses
from hangdoc.model import (BUNDLE_SCHEMA, Bundle, GpuState, Host, IoCounters, Job, LogTail, Options, ProcessInfo,
                           ProcSample, ProcStat, Role, Snapshot, ThreadCounters)
from hangdoc.report.judge import judge
from tests.unit.test_progress import SITE, TRAIN, dump, main_frame, pyframe

DL = SITE + "torch/utils/data/dataloader.py"
C10D = SITE + "torch/distributed/distributed_c10d.py"


def module(line: int) -> dict:
    """The `<module>` frame of a script whose loop is at module level: py-spy reads no locals there."""
    return pyframe("<module>", TRAIN, line, {})


def forward(line: int) -> list[dict]:
    return [pyframe("Linear.forward", SITE + "torch/nn/modules/linear.py", 125, {"input": (0x51, "<Tensor>")}),
            pyframe("Module._call_impl", SITE + "torch/nn/modules/module.py", 1786, {}), module(line)]


def in_backward_allreduce(line: int) -> list[dict]:
    return [pyframe("_engine_run_backward", SITE + "torch/autograd/graph.py", 979, {"t_outputs": (0x99, "(<T>)")}),
            pyframe("backward", SITE + "torch/autograd/__init__.py", 364, {}),
            pyframe("Tensor.backward", SITE + "torch/_tensor.py", 647, {"self": (0x98, "<Tensor>")}), module(line)]


def in_dataloader(line: int) -> list[dict]:
    return [pyframe("_MultiProcessingDataLoaderIter._try_get_data", DL, 1291, {"timeout": (2, "5.0")}),
            pyframe("_MultiProcessingDataLoaderIter._get_data", DL, 1454, {}),
            pyframe("_MultiProcessingDataLoaderIter._next_data", DL, 1480, {}),
            pyframe("_BaseDataLoaderIter.__next__", DL, 733, {}), module(line)]


def sample(pid, frames, cpu, io=1000, woken=0, active=None, probe=False, off_cpu=None) -> ProcSample:
    """One process's sample; `probe`: read natively on hangdoc's own (its native frames tell the wait)."""
    active = frames[0]["name"] not in WAITS if active is None else active
    stack = dump(frames, active)
    stat = ProcStat(state="S", wchan=None, syscall=None, utime_s=cpu, stime_s=0.0, rss_bytes=1 << 30,
                    num_threads=12, io=IoCounters(io, io, 0, 0, 10, 10),
                    main_thread=ThreadCounters(cpu_s=cpu, voluntary_switches=7 + woken, involuntary_switches=3,
                                               off_cpu_s=off_cpu))
    return ProcSample(pid=pid, alive=True, proc=stat, stack=dataclasses.replace(stack, probe=True) if probe else stack)


def job_bundle(rows, interval: float = 2.0, outputs=None) -> Bundle:
    """rows: one list per sample of dicts per rank: frames, and cpu / io / woken (cumulative);
    outputs: the step the job's output had printed last at each sample."""
    n = len(rows[0])
    ranks = tuple(ProcessInfo(pid=100 + r, ppid=1, role=Role.RANK, cmdline=("python", "train.py"), exe=None,
                              start_time=0.0, env={}, rank=r, world_size=n, rank_pid=100 + r)
                  for r in range(n))
    samples = tuple(
        Snapshot(time=1000.0 + i * interval, took_s=0.05,
                 processes=tuple(sample(100 + r, **cell) for r, cell in enumerate(row)),
                 gpu=GpuState(status="unavailable", reason="test"), output_step=outputs[i] if outputs else None)
        for i, row in enumerate(rows))
    return Bundle(schema=BUNDLE_SCHEMA, hangdoc_version="0", created=1.0,
                  host=Host("node-1", "x86_64", "6.1", 8, "3.11", "2.13.0"),
                  job=Job(run_id="r", master_addr="127.0.0.1", master_port=29500, world_size=n,
                          launcher_pid=1, processes=ranks),
                  samples=samples, options=Options(interval_s=interval))


WAITS = {"_engine_run_backward", "_MultiProcessingDataLoaderIter._try_get_data"}   # py-spy: not active
SECONDS = 90        # longer than the default threshold, and than anything learned here
SHAPES = [lambda: forward(30), lambda: in_backward_allreduce(31), lambda: in_dataloader(28)]


def went_round_then_stood() -> list:
    """Ten samples going round a module-level loop, then rank 0 blocked in the backward's all_reduce
    (asleep, no bytes) and rank 1 waiting on its DataLoader, for ten more."""
    rows = [[{"frames": SHAPES[(i + r) % 3](), "cpu": 1.0 + i} for r in range(2)] for i in range(10)]
    return rows + [[{"frames": in_backward_allreduce(31), "cpu": 11.0}, {"frames": in_dataloader(28), "cpu": 11.0}]
                   for _ in range(10)]


def test_a_module_level_loop_going_round_is_healthy_past_the_default_threshold():
    # GIVEN a loop at module level (no counters anywhere), whose samples land on its lines in turn:
    # the forward, the backward's all_reduce, the DataLoader; the CPU moves, the sockets do not
    rows = [[{"frames": SHAPES[(i + r) % 3](), "cpu": 1.0 + i} for r in range(2)] for i in range(SECONDS // 2)]
    # WHEN judged
    report = judge(job_bundle(rows)).report
    # THEN it steps (the stack went round), it is healthy, and no counter is claimed read
    assert report.verdict == "healthy"
    assert report.threshold.steps_seen > 20 and report.threshold.source == "learned"
    assert report.threshold.signal == "frames"


def test_a_module_level_rank_caught_in_the_same_collective_but_waking_steps():
    # GIVEN both ranks caught in the backward's all_reduce at every sample (the same frames), and
    # between samples their main threads ran and slept hundreds of times: collectives completed
    rows = [[{"frames": in_backward_allreduce(31), "cpu": 1.0 + 0.4 * i, "woken": 300 * i}] * 2
            for i in range(SECONDS // 2)]
    # WHEN judged
    report = judge(job_bundle(rows)).report
    # THEN healthy: the wake-ups are its steps
    assert report.verdict == "healthy" and report.threshold.steps_seen > 20


def test_a_module_level_rank_caught_in_the_same_collective_moving_bytes_steps():
    # GIVEN the same, the main thread not seen waking, but the process moving bytes (gloo's sockets)
    rows = [[{"frames": in_backward_allreduce(31), "cpu": 1.0, "io": 1000 + 200_000 * i}] * 2
            for i in range(SECONDS // 2)]
    # WHEN judged THEN healthy
    assert judge(job_bundle(rows)).report.verdict == "healthy"


def test_a_module_level_job_where_nothing_moves_is_a_hang_with_its_culprit():
    # GIVEN ten samples going round the loop, then rank 0 blocked in the all_reduce (asleep, no bytes)
    # and rank 1 waiting on its DataLoader: every witness says nothing moves
    # WHEN judged
    report = judge(job_bundle(went_round_then_stood())).report
    # THEN a hang, rank 1 the culprit, from a threshold learned from the steps the stack showed
    assert report.verdict == "hang" and report.culprit_ranks == (1,)
    assert report.threshold.source == "learned" and report.threshold.hang_after_s == HANG_FLOOR_S


def test_a_module_level_job_never_seen_moving_waits_for_the_default():
    # GIVEN a job stuck before hangdoc came: no witness ever saw it move, 40 s of samples
    rows = [[{"frames": in_backward_allreduce(31), "cpu": 5.0}, {"frames": in_dataloader(28), "cpu": 5.0}]
            for _ in range(21)]
    # WHEN judged THEN not yet a hang: no step seen is waited out to the default
    report = judge(job_bundle(rows)).report
    assert report.verdict != "hang" and report.threshold.hang_after_s == DEFAULT_HANG_AFTER_S


def test_the_start_up_gap_is_not_the_jobs_rhythm():
    # GIVEN a loop with readable counters: its first step after 10 s (workers starting, a first
    # batch), then a step every sample (2 s)
    step = [0] * 6 + list(range(1, 40))
    rows = [[{"frames": [pyframe("Linear.forward", SITE + "torch/nn/modules/linear.py", 125, {}),
                         main_frame(s, 0xB0 + s, 86), module(120)], "cpu": 1.0 + i}] * 2
            for i, s in enumerate(step)]
    # WHEN judged
    report = judge(job_bundle(rows)).report
    # THEN the threshold is learned from the steady steps, not from the start-up's gap
    assert report.threshold.longest_step_s == pytest.approx(2.0)


def spin_line(which: str) -> list[dict]:
    """A host spinning at its sync line, `while not all(w.is_completed() for w in work): pass`:
    a sample catches the line's own frame or the generator expression running on it."""
    frames = [pyframe("host_value", TRAIN, 69, {"tensor": (0x61, "<Tensor>"), "pending": (0x62, "[...]")}),
              main_frame(25, 0xB25, 110), module(140)]
    if which == "genexpr":
        frames.insert(0, pyframe("<genexpr>", TRAIN, 69, {".0": (0x63, "<iterator>"), "w": (0x64, "<Work>")}))
    return frames


def test_a_spin_line_is_one_place_whichever_frame_a_sample_caught():
    # GIVEN the two shapes of one spin line, and a genuinely different line
    a, b = dump(spin_line("own")).main.frames, dump(spin_line("genexpr")).main.frames
    elsewhere = dump([pyframe("host_value", TRAIN, 70, {})] + spin_line("own")[1:]).main.frames
    # THEN they are one place and one region; the next line is another
    assert place(a) == place(b) and region(a) == region(b)
    assert place(a) != place(elsewhere)


def test_ranks_spinning_at_one_line_are_one_class_whichever_frame_their_samples_caught():
    # GIVEN three ranks that stepped, then: ranks 0 and 1 spin at their sync line (CPU burning, the
    # counters still), rank 0's samples on the line's own frame, rank 1's on its generator
    # expression; rank 2 waits on its DataLoader
    def running(i):
        return {"frames": [pyframe("busy_for", TRAIN, 40, {}), main_frame(i, 0xB0 + i, 105), module(140)],
                "cpu": 1.0 + i}
    rows = [[running(i)] * 3 for i in range(6)]
    rows += [[{"frames": spin_line("own"), "cpu": 7.0 + 2 * j},
              {"frames": spin_line("genexpr" if j % 2 else "own"), "cpu": 7.0 + 2 * j},
              {"frames": [*in_dataloader(28)[:-1], main_frame(25, 0xB25, 102), module(140)], "cpu": 7.0}]
             for j in range(14)]
    # WHEN judged
    report = judge(job_bundle(rows)).report
    # THEN a hang with rank 2 alone the culprit: ranks 0 and 1 wait at one place
    assert report.verdict == "hang" and report.culprit_ranks == (2,)


def test_a_module_level_rank_computing_at_one_line_while_moving_bytes_and_waking_steps():
    # GIVEN a fast loop at module level caught in its forward at every sample, its main thread
    # woken thousands of times and megabytes through its sockets and pipes in between
    rows = [[{"frames": forward(30), "cpu": 1.0 + 0.5 * i, "woken": 2000 * i, "io": 1000 + 30_000_000 * i}] * 2
            for i in range(SECONDS // 2)]
    # WHEN judged THEN it steps, and it is healthy
    report = judge(job_bundle(rows)).report
    assert report.verdict == "healthy" and report.threshold.steps_seen > 20


def test_a_compute_loop_that_never_ends_at_module_level_is_no_step():
    # GIVEN rank 1 computing at one module line for ever (CPU, no sleep, no bytes); rank 0 blocked
    # in the backward's all_reduce, after ten samples of steps
    rows = [[{"frames": SHAPES[(i + r) % 3](), "cpu": 1.0 + i, "woken": 50 * i} for r in range(2)] for i in range(10)]
    rows += [[{"frames": in_backward_allreduce(31), "cpu": 11.0, "woken": 450},
              {"frames": forward(30), "cpu": 11.0 + 2 * j, "woken": 450}] for j in range(12)]
    # WHEN judged THEN a hang, rank 1 the culprit
    report = judge(job_bundle(rows)).report
    assert report.verdict == "hang" and report.culprit_ranks == (1,)


def test_a_hang_says_what_each_witness_saw():
    # GIVEN the module-level job that went round its loop, then stood (rank 0 blocked in the
    # all_reduce, rank 1 waiting on its DataLoader)
    # WHEN judged
    report = judge(job_bundle(went_round_then_stood())).report
    said = {w.name: w for w in report.threshold.witnesses}
    # THEN the report says which witnesses it had and what each said: no counters to read, and the
    # stack, the main threads and the bytes all stood
    assert said["loop counters"].moved is None and "module level" in said["loop counters"].said
    assert said["stack"].moved is False and said["main threads"].moved is False and said["bytes"].moved is False
    assert "rank 0 asleep (0.00 s of CPU" in said["main threads"].said
    # AND a healthy report carries none (nothing went quiet)
    moving = [[{"frames": SHAPES[(i + r) % 3](), "cpu": 1.0 + i} for r in range(2)] for i in range(30)]
    assert judge(job_bundle(moving)).report.threshold.witnesses == ()


def test_the_step_lines_a_job_prints_are_read_as_its_output_step():
    # GIVEN output of the shapes users print: a log line, a key=value, tqdm's bar, a framework's
    tails = (LogTail("a", ("[rank 0] step 360 loss 2.490 7.6 steps/s", "warming up")),
             LogTail("b", ("Epoch 1:  45%|####5     | 120/264 [00:10<00:12, 11.6it/s, loss=0.3]",)),
             LogTail("c", ("iter=7 lr=0.1", "{'loss': 0.31, 'global_step': 412}")))
    # THEN each source's last step line counts, and the largest is the output's step
    assert output_step(tails) == 412
    assert output_step((LogTail("a", ("Epoch 1 done, batch_size=32, 7.6 steps/s",)),)) is None
    assert output_steps(job_bundle([[{"frames": forward(30), "cpu": 1.0}]] * 4, outputs=[None, 5, 5, 9]).samples) \
        == (1006.0,)


def test_a_job_whose_frames_stand_but_whose_output_prints_new_steps_is_not_hung():
    # GIVEN a module-level job caught in the same all_reduce at every sample, asleep, no bytes (what a
    # sampler unlucky with a fast loop could see), whose output prints a new step every sample
    rows = [[{"frames": in_backward_allreduce(31), "cpu": 1.0}] * 2 for _ in range(SECONDS // 2)]
    report = judge(job_bundle(rows, outputs=[40 * i for i in range(SECONDS // 2)])).report
    # THEN it is not a hang: the output is a witness of its steps
    assert report.verdict != "hang" and report.threshold.steps_seen == 0
    # AND the same job whose output stood is, with the output witness saying so
    stood = judge(job_bundle(rows, outputs=[400] * (SECONDS // 2))).report
    said = {w.name: w for w in stood.threshold.witnesses}
    assert stood.verdict == "hang" and said["output"].moved is False and "stayed at 400" in said["output"].said


def in_main(frames: list[dict], batch: int) -> list[dict]:
    """The same shapes with the loop in `main()`, `while True: batch = next(it)`, its step kept on an
    object (`state.step`): the only integer of its frame is `rank`, which never moves."""
    return frames[:-1] + [pyframe("main", TRAIN, frames[-1]["line"],
                                  {"rank": (0x11, "0"), "state": (0x12, "<TrainState>"),
                                   "batch": (0x900 + batch, "<list>")})]


def test_an_integer_that_never_moves_is_not_the_loops_counter():
    # GIVEN a loop in main() whose step lives on an object, `rank` its only integer local, caught in
    # turn in the forward and in the backward's all_reduce (no counter ever moves)
    shapes = [lambda: forward(30), lambda: in_backward_allreduce(31)]
    rows = [[{"frames": in_main(shapes[(i + r) % 2](), i), "cpu": 1.0 + i} for r in range(2)]
            for i in range(SECONDS // 2)]
    # WHEN judged
    report = judge(job_bundle(rows)).report
    # THEN `rank` standing still is not "the loop's counters stood" (which read this healthy job as
    # HANG): the stack going round tells the steps, and the threshold is learned from them
    assert report.verdict == "healthy"
    assert report.threshold.source == "learned" and report.threshold.steps_seen > 20
    assert report.threshold.hang_after_s <= 3 * 2 * 2 + 10


def in_socket_read(line: int) -> list[dict]:
    """Rank 0 downloading its dataset into memory (urllib), asleep in the socket read."""
    return [pyframe("SocketIO.readinto", "/usr/lib/python3.11/socket.py", 706, {"b": (0x61, "<memoryview>")}),
            pyframe("HTTPResponse._safe_read", "/usr/lib/python3.11/http/client.py", 638, {"amt": (0x62, "13107200")}),
            pyframe("HTTPResponse.read", "/usr/lib/python3.11/http/client.py", 489, {}), module(line)]


def in_barrier(line: int) -> list[dict]:
    return [pyframe("barrier", C10D, 5356, {"group": (0x71, "None")}), module(line)]


def download_rows(arrivals: int, n: int, off_cpu: float | None = None) -> list[list[dict]]:
    """Rank 0 in a socket read, its main thread woken `arrivals` times a sample beyond hangdoc's
    reads, no CPU worth counting and no bytes /proc/PID/io counts; rank 1 asleep at the barrier."""
    def counters(cell, i):
        return {**cell, "woken": (arrivals + 2) * i, "off_cpu": off_cpu if i == 0 else 0.1}
    return [[counters({"frames": in_socket_read(7), "cpu": 0.5, "active": False}, i),
             {"frames": in_barrier(9), "cpu": 0.5, "active": False, "off_cpu": off_cpu if i == 0 else 5.0 + 2 * i}]
            for i in range(n)]


@pytest.mark.parametrize("arrivals", [12, 4])
def test_a_rank_downloading_while_the_others_wait_at_a_barrier_is_not_hung(arrivals):
    # GIVEN rank 0 downloading its dataset (urllib into memory) for 90 s while rank 1 waits at the
    # barrier: no CPU, no bytes /proc/PID/io counts (recv() is not read()), the same frames at every
    # sample; only its main thread's wake-ups in the socket read say that data arrives
    rows = download_rows(arrivals, SECONDS // 2)
    # WHEN judged (past the default threshold)
    report = judge(job_bundle(rows)).report
    # THEN not a hang, and the witness says why
    assert report.verdict != "hang", report.headline


def test_a_rank_downloading_when_a_late_watch_came_is_not_hung_by_the_past():
    # GIVEN a watch attached 30 s into the download: rank 1 off the CPU at the barrier for 30 s
    rows = download_rows(12, 8, off_cpu=30.0)
    # WHEN judged after 14 s of samples THEN not a hang (the past rule needs rank 0 asleep)
    report = judge(job_bundle(rows)).report
    assert report.verdict != "hang", report.headline


def test_a_rank_in_a_socket_read_its_peer_never_answers_is_hung():
    # GIVEN the same job, but rank 0's peer sends nothing: it wakes only for hangdoc's stack reads
    rows = download_rows(0, SECONDS // 2)
    # WHEN judged THEN a hang, rank 0 the culprit, the main threads' witness: asleep
    report = judge(job_bundle(rows)).report
    assert report.verdict == "hang" and report.culprit_ranks == (0,)
    said = {w.name: w for w in report.threshold.witnesses}
    assert said["main threads"].moved is False and "rank 0 asleep" in said["main threads"].said
    # AND attached late, the past names it as soon as the wait is old enough
    late = judge(job_bundle(download_rows(0, 8, off_cpu=30.0))).report
    assert late.verdict == "hang" and late.culprit_ranks == (0,)


def test_the_main_threads_witness_says_data_arrived_in_a_socket_read():
    # GIVEN the download, watched while nothing else moved (rank 1 at the barrier)
    points = download_rows(12, 6)
    # WHEN the witnesses of that stretch are read
    lines = timelines(job_bundle(points))
    said = {w.name: w for w in job_witnesses([(r, lines[100 + r]) for r in range(2)], (), 0.0)}["main threads"]
    # THEN rank 0 received data (not "asleep"), and the witness moved
    assert said.moved is True and "rank 0 received data in a socket read" in said.said


def test_a_spin_line_learned_from_a_native_read_is_a_wait_at_every_later_sample():
    # GIVEN rank 0 spinning at its sync line: a native probe's read caught the line's generator
    # expression holding the collective's Work, every other read only the line's own frame (no
    # Work in its locals); rank 1 waits on its DataLoader
    own = spin_line("own")
    work = pyframe("<genexpr>", TRAIN, 69, {".0": (0x63, "<list_iterator object at 0x7f3a>"),
                                            "w": (0x64, "<torch._C._distributed_c10d.Work object at 0x7f3b>")})
    spin = [work, *own]
    rows = [[{"frames": spin if i == 2 else own, "cpu": 1.0 + 2 * i, "probe": i == 2},
             {"frames": in_dataloader(28), "cpu": 1.0}] for i in range(7)]
    # WHEN its timeline is read
    line = timelines(job_bundle(rows))[100]
    # THEN the line is a wait on the others at every sample, before and after the native read
    assert all((p.reading.state, p.reading.detail) == ("collective-wait", WORK_WAIT) for p in line.points), \
        [(p.reading.state, p.reading.detail) for p in line.points]
