"""Hang or slow from the job's own progress: loop marks, the learned rhythm, suspect instants.

The NCCL shapes here are hand-made py-spy dumps (`--json --locals --native`) of the stacks the
field notes describe (ranks parked in `.item()` -> `cudaStreamSynchronize`, or in
`c10d::ProcessGroupNCCL` waits): no GPU is needed, and they go through the same parser as a
real dump. On NCCL no collective byte passes the host's syscalls, so every sample here has
frozen I/O counters and a spinning main thread: only the loop's own locals tell the truth.
"""
from __future__ import annotations

import json

import pytest

from hangdoc.analyze.progress import DEFAULT_HANG_AFTER_S, HANG_FLOOR_S, STEP_MULTIPLE, loop_moved
from hangdoc.report import judge
from hangdoc.report.judge import exit_code as verdict_exit_code
from hangdoc.collect.loopmark import loop_mark
from hangdoc.collect.stacks import parse_dump
from hangdoc.base.errors import EXIT_SUSPECT
from hangdoc.model import (BUNDLE_SCHEMA, is_job_file, Bundle, GpuState, Host, IoCounters, Job, Options, ProcessInfo,
                           ProcSample, ProcStat, Role, Snapshot, ThreadCounters)
from hangdoc.base.serde import to_dict

SITE = "/opt/venv/lib/python3.11/site-packages/"
TRAIN = "/home/user/asr/train.py"


def pyframe(name, filename, line, locals_=None):
    short = filename.split("site-packages/")[-1] if "site-packages/" in filename else filename.rsplit("/", 1)[-1]
    frame = {"name": name, "filename": filename, "short_filename": short, "line": line}
    if locals_ is not None:
        frame["locals"] = [{"name": k, "addr": addr, "arg": False, "repr": r} for k, (addr, r) in locals_.items()]
    return frame


def native(name):
    return {"name": name, "filename": "libtorch_cuda.so", "short_filename": "libtorch_cuda.so", "line": 0}


def main_frame(step, batch_addr, line=88):
    return pyframe("main", TRAIN, line, {"step": (0x10, str(step)), "epoch": (0x20, "0"),
                                          "batch": (batch_addr, f"<Tensor at {hex(batch_addr)}>"),
                                          "run_name": (0x30, '"exp-hf_Secret1234567890abcdef"')})


def at_item(step, batch_addr):
    """A rank parked in `loss.item()`: NCCL's all_reduce returned, the sync waits for the GPU."""
    return [native("cudaStreamSynchronize"), native("at::native::_local_scalar_dense_cuda"),
            native("at::_ops::_local_scalar_dense::call"),
            main_frame(step, batch_addr, 91),
            pyframe("<module>", TRAIN, 120, {})]


def in_nccl_wait(step, batch_addr):
    """A rank blocked inside DDP's reducer on a ProcessGroupNCCL work (backward)."""
    return [native("c10d::ProcessGroupNCCL::WorkNCCL::synchronizeStream"), native("c10d::Reducer::finalize_backward"),
            pyframe("_engine_run_backward", SITE + "torch/autograd/graph.py", 829, {"t_outputs": (0x99, "(<Tensor>)")}),
            pyframe("backward", SITE + "torch/_tensor.py", 626, {"self": (0x98, "<Tensor>")}),
            main_frame(step, batch_addr, 89), pyframe("<module>", TRAIN, 120, {})]


def in_dataloader(step, batch_addr):
    dl = SITE + "torch/utils/data/dataloader.py"
    return [pyframe("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113, {"block": (1, "True")}),
            pyframe("_MultiProcessingDataLoaderIter._try_get_data", dl, 1291, {"timeout": (2, "5.0")}),
            pyframe("_MultiProcessingDataLoaderIter._get_data", dl, 1454, {}),
            pyframe("_MultiProcessingDataLoaderIter._next_data", dl, 1480, {}),
            pyframe("_BaseDataLoaderIter.__next__", dl, 733, {}),
            main_frame(step, batch_addr, 84), pyframe("<module>", TRAIN, 120, {})]


def computing(x_addr, line=40):
    """A rank in a compute loop of its own that never ends: `while True: x = f(x)`."""
    return [pyframe("heavy_compute", TRAIN, line, {"x": (x_addr, "<Tensor>")}),
            pyframe("before_step", TRAIN, 50, {"self": (0x70, "<Hooks>"), "step": (0x71, "5")}),
            main_frame(5, 0xB5, 86), pyframe("<module>", TRAIN, 120, {})]


def dump(frames, active=True):
    raw = [{"pid": 1, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 1,
            "active": active, "owns_gil": False, "frames": frames}]
    return parse_dump(raw, native=True, loop_locals=True).stack


def proc(cpu, io=1000, state="R"):
    """NCCL: the syscall counters stay put whatever the GPUs do; the spin burns CPU."""
    return ProcStat(state=state, wchan=None, syscall=None, utime_s=cpu, stime_s=0.0, rss_bytes=1 << 30,
                    num_threads=120, io=IoCounters(io, io, 0, 0, 10, 10),
                    main_thread=ThreadCounters(cpu_s=cpu, voluntary_switches=7, involuntary_switches=3))


def bundle(rows, interval=2.0, hang_after=None) -> Bundle:
    """rows: one list per sample of (frames, cpu, io, active) per rank."""
    ranks = tuple(ProcessInfo(pid=100 + r, ppid=1, role=Role.RANK, cmdline=("python", "train.py"), exe=None,
                              start_time=0.0, env={}, rank=r, world_size=len(rows[0]), rank_pid=100 + r,
                              libs=("/usr/lib/libnccl.so.2",))
                  for r in range(len(rows[0])))
    samples = []
    for i, row in enumerate(rows):
        procs = tuple(ProcSample(pid=100 + r, alive=True, proc=proc(cpu, io), stack=dump(frames, active))
                      for r, (frames, cpu, io, active) in enumerate(row))
        samples.append(Snapshot(time=1000.0 + i * interval, took_s=0.05, processes=procs,
                                gpu=GpuState(status="unavailable", reason="test")))
    return Bundle(schema=BUNDLE_SCHEMA, hangdoc_version="0", created=1.0,
                  host=Host("gpu-node-7", "x86_64", "6.1", 96, "3.11", "2.13.0"),
                  job=Job(run_id="r", master_addr="10.0.0.1", master_port=29500, world_size=len(rows[0]),
                          launcher_pid=1, processes=ranks),
                  samples=tuple(samples), options=Options(interval_s=interval, hang_after_s=hang_after))


def test_loop_marks_keep_integers_and_digests_never_reprs():
    # GIVEN a dump whose job frame holds a token-shaped string and ints
    stack = dump(at_item(4812, 0xA1))
    # WHEN it is parsed with locals and serialised as a bundle would be
    mark = stack.main.loop
    text = json.dumps(to_dict(stack))
    # THEN the counters are there by value, the library frames are not, and no repr survives
    assert [f.function for f in mark.frames] == ["<module>", "main"]
    assert dict(mark.frames[1].counters) == {"step": 4812, "epoch": 0}
    assert "hf_Secret" not in text and "exp-" not in text and "Tensor at" not in text


def test_job_frames_exclude_the_standard_library_and_torch_but_not_training_frameworks():
    assert is_job_file(TRAIN)
    assert is_job_file(SITE + "lightning/pytorch/loops/fit_loop.py")
    assert is_job_file(SITE + "transformers/trainer.py")
    assert not is_job_file(SITE + "torch/distributed/distributed_c10d.py")
    assert not is_job_file("/usr/lib/python3.11/threading.py")
    assert not is_job_file("<frozen importlib._bootstrap>")


def test_what_counts_as_a_step():
    # GIVEN pairs of loop marks of one rank
    def mark(frames):
        return loop_mark(frames)
    # THEN a counter that moved is a step; a new batch object while waiting is a step
    assert loop_moved(mark(at_item(1, 0xA1)), mark(at_item(2, 0xA1)), waiting=True)
    assert loop_moved(mark(at_item(1, 0xA1)), mark(at_item(1, 0xA2)), waiting=True)
    # AND the same marks are no step
    assert not loop_moved(mark(at_item(1, 0xA1)), mark(at_item(1, 0xA1)), waiting=True)
    # AND a compute loop rebinding its own locals forever is no step (its callers did not move)
    assert not loop_moved(mark(computing(0x1)), mark(computing(0x2, line=41)), waiting=False)
    # AND a counter seen in only one of the two marks (the frame's locals came or went) is not compared
    with_step = mark([main_frame(3, 0xB1), pyframe("<module>", TRAIN, 120, {})])
    without = mark([pyframe("main", TRAIN, 88, {"epoch": (0x20, "0")}), pyframe("<module>", TRAIN, 120, {})])
    assert not loop_moved(with_step, without, waiting=False)


def nccl_rows(n_moving, n_frozen, culprit_frames=None):
    rows = []
    for i in range(n_moving):        # both ranks step every sample: parked at .item(), new batch each time
        rows.append([(at_item(100 + i, 0xA0 + i), 10.0 + 2 * i, 5000, True),
                     (at_item(100 + i, 0xC0 + i), 10.0 + 2 * i, 5000, True)])
    for j in range(n_frozen):        # rank 0 still spins at .item(); rank 1 never reaches it
        cpu = 10.0 + 2 * (n_moving + j)
        rows.append([(at_item(100 + n_moving, 0xA0 + n_moving), cpu, 5000, True),
                     ((culprit_frames or in_dataloader)(100 + n_moving, 0xC0 + n_moving), 3.0, 5000, False)])
    return rows


def test_nccl_ranks_parked_at_item_with_moving_counters_are_healthy_even_at_a_short_threshold():
    # GIVEN two NCCL ranks caught at the same `.item()` line in every sample, no byte through syscalls,
    # but their step counters move
    rows = [[(at_item(100 + i, 0xA0 + i), 10.0 + 2 * i, 5000, True),
             (at_item(100 + i, 0xC0 + i), 10.0 + 2 * i, 5000, True)] for i in range(15)]
    # WHEN diagnosed with --hang-after 4 (the old proxy said HANG here: same frames, no bytes)
    report = judge(bundle(rows), hang_after=4.0).report
    # THEN healthy, and the report says how it judged
    assert report.verdict == "healthy"
    assert report.threshold.signal == "loop" and report.threshold.quiet_s < 4


def test_nccl_hang_is_called_from_frozen_counters_after_the_learned_threshold():
    # GIVEN 8 samples of steady steps, then rank 1 stuck waiting on its DataLoader while rank 0 spins at .item()
    rows = nccl_rows(8, 7)
    # WHEN diagnosed with no threshold given
    report = judge(bundle(rows)).report
    # THEN the threshold is learned from the steps (2 s apart: the floor applies) and the verdict is a hang
    assert report.threshold.source == "learned"
    assert report.threshold.hang_after_s == HANG_FLOOR_S
    assert report.threshold.longest_step_s == pytest.approx(2.0)
    assert report.verdict == "hang" and report.culprit_ranks == (1,)
    ranks = {r.rank: r.state for r in report.ranks}
    assert ranks == {0: "collective-wait", 1: "dataloader-wait"}
    # AND the straggler finding cites the waiting rank's loop counters and its main thread's wake-ups
    straggler = next(f for f in report.findings if f.rule == "collective-straggler")
    waiting = next(e for e in straggler.evidence if e.startswith("rank 0 has not stepped"))
    assert "step=108" in waiting and "never went to sleep" in waiting


def test_nccl_stall_shorter_than_the_learned_threshold_is_not_a_hang():
    # GIVEN the same job, frozen for 8 s only (4 samples): less than the 10 s floor
    report = judge(bundle(nccl_rows(8, 4))).report
    # THEN not a hang; the ranks are split and quiet for more than a third of it: suspect
    assert report.verdict == "suspect"
    assert verdict_exit_code(report.verdict) == EXIT_SUSPECT


def test_slow_steps_raise_the_learned_threshold():
    # GIVEN rank 0 waiting in NCCL backward and rank 1 computing; they step only every 3rd sample (6 s)
    rows = []
    for i in range(12):
        step = 100 + i // 3
        rows.append([(in_nccl_wait(step, 0xA0 + step), 10.0 + i, 5000, False),
                     (at_item(step, 0xC0 + step), 10.0 + i, 5000, True)])
    # WHEN diagnosed (learned)
    report = judge(bundle(rows)).report
    # THEN the longest step is about 6 s and the threshold three times that: no hang
    assert report.threshold.longest_step_s == pytest.approx(6.0)
    assert report.threshold.hang_after_s == pytest.approx(STEP_MULTIPLE * 6.0)
    assert report.verdict == "healthy"


def test_every_rank_in_the_same_nccl_wait_with_frozen_counters_is_a_hang_with_no_culprit_here():
    # GIVEN both ranks parked in ProcessGroupNCCL inside backward, counters frozen for 24 s after steps
    rows = [[(in_nccl_wait(100 + i, 0xA0 + i), 10.0 + i, 5000, False)] * 2 for i in range(4)]
    rows += [[(in_nccl_wait(104, 0xA4), 14.0 + j, 5000, False)] * 2 for j in range(12)]
    report = judge(bundle(rows)).report
    # THEN a hang; every rank here waits in the same collective, so the culprit is elsewhere
    assert report.verdict == "hang" and report.culprit_ranks == ()
    assert {r.state for r in report.ranks} == {"collective-wait"}


def test_a_compute_loop_that_never_ends_is_the_culprit():
    # GIVEN rank 1 looping in heavy_compute (its own locals churn) while rank 0 waits in NCCL
    rows = [[(in_nccl_wait(100 + i, 0xA0 + i), 10.0 + i, 5000, False),
             (at_item(100 + i, 0xC0 + i), 10.0 + i, 5000, True)] for i in range(5)]
    rows += [[(in_nccl_wait(105, 0xA5), 15.0 + j, 5000, False),
              (computing(0x500 + j, line=40 + j % 2), 15.0 + 2 * j, 5000, True)] for j in range(8)]
    report = judge(bundle(rows)).report
    # THEN a hang with rank 1 as the culprit, once the learned threshold passed
    assert report.verdict == "hang" and report.culprit_ranks == (1,)


def test_no_step_seen_yet_waits_for_the_conservative_default():
    # GIVEN a job already stuck when watching began: 20 s of frozen samples, no step ever seen
    rows = [[(at_item(7, 0xA7), 10.0 + j, 5000, True), (in_dataloader(7, 0xC7), 3.0, 5000, False)]
            for j in range(11)]
    report = judge(bundle(rows)).report
    # THEN no hang yet (the default is 60 s) but a suspect: who waits for whom
    assert report.threshold.source == "default" and report.threshold.hang_after_s == DEFAULT_HANG_AFTER_S
    assert report.verdict == "suspect" and report.culprit_ranks == (1,)
    # AND a given --hang-after keeps its meaning
    assert judge(bundle(rows), hang_after=15.0).report.verdict == "hang"


def test_one_instant_never_says_healthy_when_the_ranks_are_split():
    # GIVEN a single sample: rank 0 in a collective, rank 1 in its DataLoader
    one = bundle([[(in_nccl_wait(7, 0xA7), 1.0, 5000, False), (in_dataloader(7, 0xC7), 1.0, 5000, False)]])
    # THEN suspect, naming who waits; with --hang-after 0, as documented, a hang
    report = judge(one).report
    assert report.verdict == "suspect" and report.culprit_ranks == (1,)
    assert judge(one, hang_after=0.0).report.verdict == "hang"
    # AND an instant where every rank computes is healthy
    busy = bundle([[(computing(0x1), 1.0, 5000, True), (computing(0x2), 1.0, 5000, True)]])
    assert judge(busy).report.verdict == "healthy"


# --- poll loops are waits, not steps -----------------------------------------------------------

def polling(attempts, batch_addr=0x60):
    """A retry loop of the job's (or a library's) own, asleep in time.sleep (C: no frame of its own)
    between tries of a stale lock: only its `attempts` integer changes from try to try."""
    return [pyframe("acquire_lock", "/home/user/asr/cache.py", 25,
                    {"path": (batch_addr, '"/data/cache.lock"'), "attempts": (0x61, str(attempts))}),
            main_frame(7, 0xB7, 80), pyframe("<module>", TRAIN, 120, {})]


def in_queue_get(step, batch_addr):
    """A training loop fed by a thread of its own: it waits at the same `queue.get()` line every step."""
    lib = "/usr/lib/python3.11/"
    return [pyframe("Condition.wait", lib + "threading.py", 327, {"waiter": (0x80, "<lock>")}),
            pyframe("Queue.get", lib + "queue.py", 171, {"block": (0x81, "True")}),
            main_frame(step, batch_addr, 84), pyframe("<module>", TRAIN, 120, {})]


def test_a_counter_that_moves_while_parked_in_one_wait_is_a_poll_not_a_step():
    def mark(frames):
        return loop_mark(frames)
    # GIVEN two marks of a retry loop asleep at the same line, only its attempts counter moved
    a, b = mark(polling(3)), mark(polling(13))
    # THEN parked at the same place it is no step; elsewhere the same change is one
    assert not loop_moved(a, b, waiting=True, poll=True)
    assert loop_moved(a, b, waiting=True)
    # AND while parked, an outer frame that moved (control came back to the loop) or a new object in
    # the waiting frame (a new batch) still is a step
    assert loop_moved(mark(in_queue_get(1, 0xA1)), mark(in_queue_get(1, 0xA2)), waiting=True, poll=True)
    outer = [polling(3)[0], main_frame(8, 0xB7, 80), polling(3)[2]]
    assert loop_moved(a, mark(outer), waiting=True, poll=True)


def test_a_rank_polling_a_stale_lock_while_the_other_waits_in_a_collective_is_a_hang_not_healthy():
    # GIVEN rank 0 parked in NCCL backward (its counters frozen) and rank 1 asleep in a retry loop
    # around a lock file, its `attempts` growing by 10 every sample (the loop moves; the job does not)
    rows = [[(in_nccl_wait(104, 0xA4), 10.0 + i, 5000, False), (polling(10 * i), 3.0, 5000, False)]
            for i in range(9)]
    # WHEN diagnosed with --hang-after 10 (16 s of samples)
    report = judge(bundle(rows), hang_after=10.0).report
    # THEN no step was seen: a hang, rank 1 the culprit, read as waiting (idle, stuck), not active
    assert report.threshold.steps_seen == 0
    assert report.verdict == "hang" and report.culprit_ranks == (1,)
    rank1 = next(r for r in report.ranks if r.rank == 1)
    assert (rank1.state, rank1.progress) == ("idle", "stuck")
    assert rank1.top_frame == "acquire_lock (cache.py:25)"


def test_a_training_loop_that_waits_at_one_queue_get_every_step_still_steps():
    # GIVEN rank 1 fed by a thread of its own, caught at the same `queue.get()` line in every sample
    # (idle), a new batch each step, while rank 0 computes and waits in NCCL
    def rank0(i):
        return (in_nccl_wait(100 + i, 0xA0 + i), 10.0 + i, 5000, False) if i % 2 else \
            (at_item(100 + i, 0xA0 + i), 10.0 + i, 5000, True)
    rows = [[rank0(i), (in_queue_get(100 + i, 0xC0 + i), 10.0 + i, 5000, False)] for i in range(12)]
    # WHEN diagnosed with a short --hang-after
    report = judge(bundle(rows), hang_after=4.0).report
    # THEN both ranks step: healthy, rank 1 active
    assert report.verdict == "healthy"
    assert {r.rank: r.progress for r in report.ranks}[1] == "active"


def test_a_slow_loop_whose_samples_land_in_compute_and_all_reduce_keeps_stepping():
    # GIVEN a step of ~6 s: two samples in its own compute (the forward rebinds its tensors), one in
    # DDP's all_reduce, the step counter moving once a step
    def forward(step, x_addr, line):
        return [pyframe("forward", TRAIN, line, {"x": (x_addr, "<Tensor>")}),
                main_frame(step, 0xB0 + step, 86), pyframe("<module>", TRAIN, 120, {})]
    rows = []
    for i in range(15):
        step = 100 + i // 3
        frames = in_nccl_wait(step, 0xB0 + step) if i % 3 == 2 else forward(step, 0x500 + i, 40 + i % 2)
        rows.append([(frames, 10.0 + 2 * i, 5000, i % 3 != 2)] * 2)
    report = judge(bundle(rows)).report
    # THEN steps are seen (about 6 s apart) and the job is healthy
    assert report.threshold.steps_seen >= 8 and report.threshold.longest_step_s == pytest.approx(6.0)
    assert report.verdict == "healthy"
