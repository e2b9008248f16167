"""Data and GPUs moving are progress: a rank whose DataLoader workers read new ground in their
files, or whose GPU works (kernels moving memory and drawing power), is slow, not hung, however long
one step takes (a bz2 shard decompressed at a few MB/s, a GPU straggler's step longer than the
default threshold). Each witness has its hang beside it: workers whose offsets stand, workers that
rewind and read the same start again (random access into a bz2 stream), and a GPU that spins
(NCCL's wait reads 100 % too) are no sign; a --hang-after the user gave holds.
"""
from __future__ import annotations

import dataclasses
from unittest import mock

from hangdoc.analyze.progress import gpu_sign
from hangdoc.analyze.timeline import LiveTimelines, timelines
from hangdoc.model import (BUNDLE_SCHEMA, Bundle, GpuDevice, GpuProcess, GpuState, Host, IoCounters, Job, OpenFile,
                           Options, ProcessInfo, ProcSample, ProcStat, Role, Snapshot, ThreadCounters)
from hangdoc.render.words import headline as headline_of, threshold_line
from hangdoc.report.judge import judge
from tests.unit.test_progress import SITE, TRAIN, dump, pyframe
from tests.unit.test_witnesses import C10D, DL

LIB = "/usr/lib/python3.11/"
SHARD = "/data/libri000.tar.bz2"
INTERVAL = 2.0


def main_loop(step: int, line: int) -> dict:
    return pyframe("main", TRAIN, line, {"step": (0x10, str(step)), "batch": (0x40 + step, "<Tensor>")})


def rank_frames(rank: int, step: int, waiting: bool) -> list[dict]:
    """The loop in main(): rank 0 in the backward's all_reduce, rank 1 waiting on its DataLoader."""
    if rank == 0:
        return [pyframe("all_reduce", C10D, 2810, {"tensor": (0x91, "<Tensor>")}), main_loop(step, 31)]
    wait = [pyframe("_MultiProcessingDataLoaderIter._try_get_data", DL, 1291, {"timeout": (2, "5.0")}),
            pyframe("_BaseDataLoaderIter.__next__", DL, 733, {}), main_loop(step, 28)]
    return wait if waiting else [pyframe("Linear.forward", SITE + "torch/nn/modules/linear.py", 125, {}),
                                 main_loop(step, 30)]


WORKER_BZ2 = [pyframe("BZ2Decompressor.decompress", LIB + "bz2.py", 340, {}),
              pyframe("ShardDataset.__iter__", "/home/user/asr/data.py", 77, {}),
              pyframe("_worker_loop", SITE + "torch/utils/data/_utils/worker.py", 349, {})]


def proc(pid: int, frames: list[dict], cpu: float, files=(), active=True) -> ProcSample:
    stat = ProcStat(state="S", wchan=None, syscall=None, utime_s=cpu, stime_s=0.0, rss_bytes=1 << 30,
                    num_threads=8, io=IoCounters(1000, 1000, 0, 0, 10, 10), open_files=tuple(files),
                    main_thread=ThreadCounters(cpu_s=cpu, voluntary_switches=7, involuntary_switches=3))
    return ProcSample(pid=pid, alive=True, proc=stat, stack=dump(frames, active))


def bz2_straggler(stalled: int, worker_reads: bool, rewinds_every: int = 0, targets: tuple[int, ...] = (),
                  stepping: int = 10, offsets: tuple[float, ...] = ()) -> Bundle:
    """Two ranks stepping every sample for `stepping` samples, then for `stalled` samples waiting for
    rank 1's next batch: its worker decompresses the shard, reading it forward at 2.5 MB/s
    (`worker_reads`), or stands (blocked, no CPU, its offset still). `rewinds_every`: from the stall
    on, it goes back to the file's start every that many samples (random access into the bz2
    stream), never further than it had read before. `targets` (MB): from the stall on, it goes back
    to the start and reads forward to each target in turn (the members of a shuffled batch), then
    starts over with them. `offsets` (MB): from the stall on, the worker's offset at each sample, in turn."""
    ranks = tuple(ProcessInfo(pid=100 + r, ppid=1, role=Role.RANK, cmdline=("python", "train.py"), exe=None,
                              start_time=0.0, rank=r, world_size=2, rank_pid=100 + r) for r in range(2))
    worker = ProcessInfo(pid=201, ppid=101, role=Role.WORKER, cmdline=("python", "train.py"), exe=None,
                         start_time=1.0, rank=1, rank_pid=101, worker_index=0, num_workers=1)
    samples, offset, cpu, turn = [], 0, 0.0, 0
    for i in range(stepping + stalled):
        waiting = i >= stepping
        step = min(i, stepping)
        moving = not waiting or worker_reads
        offset += 5_000_000 if moving else 0
        if waiting and rewinds_every and (i - stepping) % rewinds_every == 0:
            offset = 5_000_000
        if waiting and targets and offset > targets[turn % len(targets)] * 1_000_000:
            offset, turn = 0, turn + 1
        if waiting and offsets:
            offset = int(offsets[(i - stepping) % len(offsets)] * 1_000_000)
        cpu += 1.8 if moving else 0.0
        rows = (proc(100, rank_frames(0, step, waiting), 1.0 + step, active=not waiting),
                proc(101, rank_frames(1, step, waiting), 1.0 + step, active=not waiting),
                proc(201, WORKER_BZ2, cpu, files=(OpenFile(5, SHARD, offset, 2_000_000_000),), active=moving))
        samples.append(Snapshot(time=1000.0 + i * INTERVAL, took_s=0.05, processes=rows,
                                gpu=GpuState(status="unavailable", reason="test")))
    return Bundle(schema=BUNDLE_SCHEMA, hangdoc_version="0", created=1.0,
                  host=Host("node-1", "x86_64", "6.1", 8, "3.11", "2.13.0"),
                  job=Job(run_id="r", master_addr="127.0.0.1", master_port=29500, world_size=2,
                          launcher_pid=1, processes=(*ranks, worker)),
                  samples=tuple(samples), options=Options(interval_s=INTERVAL))


def test_a_batch_longer_than_any_threshold_whose_data_moves_is_not_a_hang():
    # GIVEN a job stepping every 2 s (threshold learned: the floor, 10 s), then 90 s on one batch of
    # rank 1's while its worker reads the bz2 shard forward, rank 0 waiting in all_reduce
    bundle = bz2_straggler(stalled=45, worker_reads=True)
    # WHEN judged
    report = judge(bundle).report
    # THEN no hang: the data moving is progress, and the Progress line says both clocks
    assert report.verdict != "hang", report.verdict
    assert report.threshold.quiet_s >= 80 and report.threshold.moving_s <= INTERVAL and report.threshold.moving == "data"
    line = threshold_line(report)
    assert "no rank has stepped for 88 s, but the DataLoader workers' data moved on (new ground" in line, line


def test_the_same_batch_with_the_data_standing_is_the_hang():
    # GIVEN the same job, its worker blocked (offset still, no CPU) from the stall on
    bundle = bz2_straggler(stalled=45, worker_reads=False)
    # WHEN judged
    report = judge(bundle).report
    # THEN hang, rank 1 the culprit, and the workers' witness says they stood
    assert report.verdict == "hang" and report.culprit_ranks == (1,)
    workers = next(w for w in report.threshold.witnesses if w.name == "workers")
    assert workers.moved is False


def test_a_worker_that_rewinds_and_reads_the_same_start_again_is_no_sign():
    # GIVEN the same stall, the worker busy decompressing but going back to the shard's start every
    # 5 samples (each backward seek in a bz2 stream decompresses from the start): no new ground
    bundle = bz2_straggler(stalled=45, worker_reads=True, rewinds_every=5)
    # WHEN judged
    report = judge(bundle).report
    # THEN hang, rank 1 the culprit; the workers' witness says they read only what they had read before
    assert report.verdict == "hang" and report.culprit_ranks == (1,), report.verdict
    workers = next(w for w in report.threshold.witnesses if w.name == "workers")
    assert "all of it a part of their files read before" in workers.said, workers.said


def test_a_first_batch_past_the_default_threshold_read_by_backward_seeks_that_move_on_is_slow():
    # GIVEN a job that never stepped: rank 0 waits in all_reduce for 90 s while rank 1's worker reads its
    # bz2 shard by random access, going back to the file's start before each member and reading on to a
    # new one each time (12, 23, 8, 31, 17 MB, ...), never past the 50 MB it had reached: no new ground
    bundle = bz2_straggler(stalled=35, worker_reads=True, targets=(12, 23, 8, 31, 17, 27, 4, 36), stepping=10)
    bundle = dataclasses.replace(bundle, samples=bundle.samples[10:])
    # WHEN judged with no threshold given (the default 60 s: no step seen)
    report = judge(bundle).report
    # THEN slow, data-bound, rank 1 the straggler: the rate, the backward seeks and the next batch's estimate
    assert report.verdict == "slow" and report.culprit_ranks == (1,), report.verdict
    assert report.threshold.source == "default" and report.threshold.quiet_s > 60
    headline = headline_of(report)
    assert "rank 1 has waited" in headline and "at 2.5 MB/s" in headline, headline
    assert "backward seeks" in headline and "its next batch in about" in headline, headline


# A worker of the zoo's bz2-shards as `hangdoc run` sampled it (MB, every 2 s): each backward seek a
# shuffled member's, and one sample's reading (up to 30 MB) more than half of what it had reached.
SHUFFLED_FAST = (23.7, 7.4, 37.2, 7.2, 0.4, 27.4, 0.7, 25.7, 3.6, 29.0, 1.5, 28.3, 24.0, 5.2, 29.7, 9.4, 11.2)


def test_a_fast_worker_whose_random_access_ends_passes_far_apart_is_slow_not_a_rewind_for_ever():
    # GIVEN a job stepping every 2 s (threshold learned: 10 s), then 34 s on one batch of rank 1's while
    # its worker reads its bz2 shard by random access so fast that one sample's reading spans more
    # than half of the 50 MB it had reached, its passes ending at 24, 37, 7, 27, 26, 29 MB...
    bundle = bz2_straggler(stalled=len(SHUFFLED_FAST), worker_reads=True, offsets=SHUFFLED_FAST)
    # WHEN judged
    report = judge(bundle).report
    # THEN slow, rank 1 the straggler: passes that far apart are not one place, however many
    assert report.verdict == "slow" and report.culprit_ranks == (1,), report.verdict
    assert "its next batch in about" in headline_of(report), headline_of(report)


def test_a_worker_that_rewinds_to_the_same_offsets_for_ever_is_the_hang_even_with_a_first_batch():
    # GIVEN the same job, its worker going back to the start and reading to the same 20 MB every pass
    bundle = bz2_straggler(stalled=35, worker_reads=True, targets=(20,), stepping=10)
    bundle = dataclasses.replace(bundle, samples=bundle.samples[10:])
    # WHEN judged THEN hang, rank 1 the culprit: the same bytes over and over are no new data
    report = judge(bundle).report
    assert report.verdict == "hang" and report.culprit_ranks == (1,), report.verdict


def test_a_batch_whose_pace_outlasts_the_process_groups_timeout_is_the_hang():
    # GIVEN the worker that moves on, on a job whose process group times out after 100 s (as if NCCL's
    # 10 min for a 60 s batch): at the pace seen its next batch comes after the timeout
    bundle = bz2_straggler(stalled=35, worker_reads=True, targets=(12, 23, 8, 31, 17, 27, 4, 36), stepping=10)
    bundle = dataclasses.replace(bundle, samples=bundle.samples[10:])
    with mock.patch("hangdoc.analyze.diagnose.pg_timeout", return_value=100.0), \
            mock.patch("hangdoc.analyze.assess.pg_timeout", return_value=100.0):
        report = judge(bundle).report
    # THEN hang, and the Progress line says why: the batch would outlast the timeout
    assert report.verdict == "hang" and report.culprit_ranks == (1,), report.verdict
    assert "past the process group's timeout" in threshold_line(report), threshold_line(report)


def test_a_hang_after_the_user_gave_holds_whatever_the_data_does():
    # GIVEN the job whose data moves, watched with --hang-after 30
    bundle = bz2_straggler(stalled=45, worker_reads=True)
    bundle = dataclasses.replace(bundle, options=dataclasses.replace(bundle.options, hang_after_s=30.0))
    # WHEN judged with that bound
    report = judge(bundle, hang_after=30.0).report
    # THEN hang (the user's bound on a step), and the witness says the data moved all the same
    assert report.verdict == "hang" and report.culprit_ranks == (1,)
    workers = next(w for w in report.threshold.witnesses if w.name == "workers")
    assert workers.moved is True and "MB of their files they had not read before" in workers.said


# NVML readings as a real H200 gave them (tests/gpu/recorded/h200-shapes.json): a bf16 matrix-product
# loop, and a kernel spinning on a flag (how an NCCL collective waits).
WORK = dict(utilization_pct=100, memory_util_pct=23, power_w=690.0)
SPIN = dict(utilization_pct=100, memory_util_pct=0, power_w=125.0)


def gpus(rank1: dict) -> GpuState:
    def device(index: int, reading: dict) -> GpuDevice:
        return GpuDevice(index=index, uuid=f"GPU-{index}", name="H200", memory_used_bytes=1 << 34,
                         memory_total_bytes=1 << 37, power_limit_w=700.0, sm_clock_mhz=1400, sm_clock_max_mhz=1980,
                         processes=(GpuProcess(100 + index, 1 << 34),), **reading)
    return GpuState(status="ok", driver_version="580", devices=(device(0, SPIN), device(1, rank1)))


def gpu_straggler(stalled: int, rank1_works: bool) -> Bundle:
    """Two ranks stepping every sample for 10 samples, then for `stalled` samples rank 0 waits in
    all_reduce (its GPU spinning in NCCL's kernel) while rank 1's host waits at torch.cuda.synchronize
    on its GPU, which works (`rank1_works`) or spins as rank 0's does."""
    ranks = tuple(ProcessInfo(pid=100 + r, ppid=1, role=Role.RANK, cmdline=("python", "train.py"), exe=None,
                              start_time=0.0, rank=r, world_size=2, rank_pid=100 + r) for r in range(2))
    sync = [pyframe("synchronize", SITE + "torch/cuda/__init__.py", 1040, {}), main_loop(10, 33)]
    samples = []
    for i in range(10 + stalled):
        stalled_now = i >= 10
        step = min(i, 10)
        frames = ([rank_frames(0, step, True), sync] if stalled_now else
                  [rank_frames(0, step, False), rank_frames(1, step, False)])
        rows = tuple(proc(100 + r, frames[r], 1.0 + step, active=not stalled_now) for r in range(2))
        reading = (WORK if rank1_works else SPIN) if stalled_now else WORK
        samples.append(Snapshot(time=1000.0 + i * INTERVAL, took_s=0.05, processes=rows, gpu=gpus(reading)))
    return Bundle(schema=BUNDLE_SCHEMA, hangdoc_version="0", created=1.0,
                  host=Host("node-1", "x86_64", "6.1", 8, "3.11", "2.13.0"),
                  job=Job(run_id="r", master_addr="127.0.0.1", master_port=29500, world_size=2,
                          launcher_pid=1, processes=ranks),
                  samples=tuple(samples), options=Options(interval_s=INTERVAL))


def test_a_gpu_at_work_through_a_step_longer_than_any_threshold_is_not_a_hang():
    # GIVEN rank 1's GPU computing for 90 s (memory traffic, near its power limit) while rank 0's
    # GPU spins in the all_reduce kernel and no loop counter moves
    bundle = gpu_straggler(stalled=45, rank1_works=True)
    # WHEN judged
    report = judge(bundle).report
    # THEN no hang: the GPU at work is progress, and the Progress line says so
    assert report.verdict != "hang", report.verdict
    assert report.threshold.moving == "gpu" and report.threshold.moving_s <= INTERVAL
    assert "a rank's GPU was at work" in threshold_line(report)


def test_the_same_step_with_every_gpu_spinning_is_the_hang():
    # GIVEN the same, rank 1's GPU spinning as rank 0's does (utilisation 100 %, no memory traffic,
    # an idle context's power): nothing on the GPUs moves either
    bundle = gpu_straggler(stalled=45, rank1_works=False)
    # WHEN judged THEN hang
    report = judge(bundle).report
    assert report.verdict == "hang", report.verdict
    assert report.threshold.moving is None
    gpu = next(w for w in report.threshold.witnesses if w.name == "GPUs")
    assert gpu.moved is False and "rank 1's GPU spun" in gpu.said


def test_a_watch_that_reads_the_gpu_sign_every_round_gets_what_the_whole_history_gives():
    # GIVEN a watch that keeps its timelines up to date round by round, asking each round for the
    # rank's last GPU sign (memoized on the points worked out), over a GPU at work and then spinning
    bundle = gpu_straggler(stalled=20, rank1_works=True)
    spun = gpu_straggler(stalled=20, rank1_works=False)
    samples = bundle.samples[:20] + spun.samples[20:]
    live = LiveTimelines()
    for n in range(1, len(samples) + 1):
        partial = dataclasses.replace(bundle, samples=samples[:n])
        # WHEN asked every round
        rounds = {pid: gpu_sign(line) for pid, line in live.of(partial).items()}
        # THEN each round's answer is the one the history up to it gives at once
        assert rounds == {pid: gpu_sign(line) for pid, line in timelines(partial).items()}, n
    assert rounds[101] == samples[19].time      # rank 1's GPU last worked before it began to spin
