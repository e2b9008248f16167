"""Waits that do not look like waits: NCCL's spin at the next sync, and the GPU in the verdict.

On NCCL a collective returns at once and the host spins at the job's next sync (`loss.item()`),
100 % of a CPU under the job's own line. No progress is the hang whatever the ranks do; a rank
spinning with its counters still is probed natively; a sync on the GPU stream is judged by the GPU.
"""
from __future__ import annotations

import dataclasses

import msgspec
import pytest

from hangdoc.analyze.classify import classify_rank, is_gpu_sync
from hangdoc.analyze.diagnose import JobFacts, decide
from hangdoc.analyze.gpu import judged_by_gpu
from hangdoc.model import (
    FrameMark, GpuActivity, GpuDevice, GpuProcess, GpuState, LoopMark, ProcSample, RankDigest, RankState,
    Stack, StepSummary,
    Thread, Verdict,
)
from hangdoc.report.judge import judge
from tests.factories import DATALOADER_WAIT, frame, node_bundle

T0 = 1_700_000_000.0
JOB = "/home/user/job/train.py"


def digest(n: int, state: str, top: str | None, held_since: float | None, last_step: float) -> RankDigest:
    return RankDigest(rank=n, pid=100 + n, host="vm", group_rank=0, state=state, detail=None, top_frame=top,
                      stack_key=f"{state}{top}", state_since=held_since or T0, blocked_since=None, exited_at=None,
                      progress="slow", rhythm=StepSummary(20, 1.2, last_step, True), unmoved_since=None,
                      points=30, held_since=held_since)


def facts(now: float) -> JobFacts:
    return JobFacts(first=T0, now=now, logs=(), exit_code=None, hang_after=None)


def test_no_progress_with_ranks_spinning_at_their_sync_line_is_a_hang_named_by_the_rank_apart():
    # GIVEN three ranks quiet for 12 s (threshold learned: 10 s): ranks 0 and 1 computing at the
    # same line with their counters still since the stall, rank 2 waiting on its DataLoader
    now, stall = T0 + 100, T0 + 88
    ranks = [digest(0, "compute", "host_value (train.py:77)", stall + 0.5, stall),
             digest(1, "compute", "host_value (train.py:77)", stall + 0.5, stall),
             digest(2, "dataloader-wait", "_try_get_data (dataloader.py:1291)", stall + 0.2, stall)]
    # WHEN decided
    decision = decide(ranks, facts(now))
    # THEN it is a hang named from no progress alone: rank 2 the culprit, 0 and 1 spinning at their line
    assert decision.verdict == Verdict.HANG and decision.held
    assert decision.culprits == (2,) and decision.spinning == (0, 1)
    assert decision.onset == stall


def test_a_rank_that_computes_keeps_it_a_long_step():
    # GIVEN the same, but rank 1's frames move (it computes, not held)
    now, stall = T0 + 100, T0 + 88
    ranks = [digest(0, "compute", "host_value (train.py:77)", stall + 0.5, stall),
             digest(1, "compute", "forward (model.py:12)", None, stall),
             digest(2, "dataloader-wait", "_try_get_data (dataloader.py:1291)", stall + 0.2, stall)]
    # WHEN decided THEN no hang: what makes a pause a pause stays one
    assert decide(ranks, facts(now)).verdict != Verdict.HANG


def test_a_ragged_end_is_left_to_the_exits():
    # GIVEN rank 1 gone (it exited) while rank 0 lingers, held at one line past the threshold
    now, stall = T0 + 100, T0 + 88
    gone = msgspec.structs.replace(digest(1, "exited", None, None, stall), exited_at=stall + 1, exit_time=stall + 1,
                               exit_code=0)
    ranks = [digest(0, "idle", "destroy_process_group (train.py:90)", stall, stall), gone]
    # WHEN decided THEN no rank gone counts as held: the end is the exits' to judge, not a hang
    assert not decide(ranks, facts(now)).held


def test_held_for_less_than_two_thirds_of_the_threshold_is_not_yet_a_hang():
    now, stall = T0 + 100, T0 + 88
    ranks = [digest(0, "compute", "host_value (train.py:77)", now - 5, stall),
             digest(1, "dataloader-wait", "_try_get_data (dataloader.py:1291)", stall, stall)]
    assert decide(ranks, facts(now)).verdict != Verdict.HANG


def test_every_rank_at_one_line_names_no_culprit_but_is_a_hang():
    # GIVEN every rank spinning at the same line (a kernel hung on every GPU)
    now, stall = T0 + 100, T0 + 88
    ranks = [digest(r, "compute", "host_value (train.py:77)", stall, stall) for r in range(4)]
    decision = decide(ranks, facts(now))
    assert decision.verdict == Verdict.HANG and decision.culprits == () and decision.spinning == (0, 1, 2, 3)


# --- native frames and the GPU ------------------------------------------------------------------

ITEM_NATIVE = (  # innermost first, as py-spy --native gives a rank blocked at loss.item() on a GPU
    frame("cuStreamSynchronize", "libcuda.so.1", native=True),
    frame("cudaStreamSynchronize", "libcudart.so.12", native=True),
    frame("at::native::_local_scalar_dense_cuda", "libtorch_cuda.so", native=True),
    frame("train", JOB, 77),
    frame("<module>", JOB, 120),
)


def sample(frames, probe=False, active=True) -> ProcSample:
    thread = Thread(tid=100, name="MainThread", active=active, owns_gil=active, frames=frames)
    return ProcSample(100, True, None, Stack((thread,), native=probe, probe=probe))


@pytest.mark.parametrize("native, expected", [
    ("cudaStreamSynchronize", "GPU sync (cudaStreamSynchronize)"), ("cuStreamSynchronize", "GPU sync (cuStreamSynchronize)"),
    ("cudaMemcpyAsync", "GPU sync (cudaMemcpyAsync)"), ("at::native::_local_scalar_dense_cuda", None),
    ("c10d::ProcessGroupNCCL::WorkNCCL::wait", "c10d::ProcessGroupNCCL::WorkNCCL::wait"), ("ncclGroupEnd", "ncclGroupEnd"),
])
def test_each_sync_point_reads_as_its_wait(native, expected):
    # GIVEN a native probe of a rank whose innermost native frame is `native`, at the job's own line
    frames = (frame(native, "lib.so", native=True), frame("train", JOB, 77))
    reading = classify_rank(sample(frames, probe=True))
    # THEN a CUDA sync is a sync on the GPU stream, NCCL a collective
    assert reading.state == RankState.COLLECTIVE
    if expected is None:
        assert is_gpu_sync(reading.detail)
    else:
        assert reading.detail == expected


def test_the_whole_item_stack_reads_as_a_sync_on_the_gpu_stream():
    reading = classify_rank(sample(ITEM_NATIVE, probe=True))
    assert is_gpu_sync(reading.detail) and reading.frame.name == "cuStreamSynchronize"


@pytest.mark.parametrize("activity, state", [
    (GpuActivity.BUSY, RankState.COMPUTE), (GpuActivity.SPIN, RankState.COLLECTIVE),
    (GpuActivity.IDLE, RankState.COLLECTIVE), (None, RankState.COLLECTIVE),
])
def test_a_sync_on_the_gpu_stream_is_judged_by_the_gpu(activity, state):
    # GIVEN a rank at cudaStreamSynchronize WHEN its GPU reads `activity`
    reading = judged_by_gpu(classify_rank(sample(ITEM_NATIVE, probe=True)), activity)
    # THEN busy is work on its GPU, spinning or idle (or unread) a wait
    assert reading.state == state


def device(index: int, pid: int, util: int, power: float, memory: int) -> GpuDevice:
    return GpuDevice(index, f"GPU-{index}", "NVIDIA H100 80GB HBM3", util, memory, 30 << 30, 80 << 30, power, 700.0,
                     1980, 1980, (GpuProcess(pid, 30 << 30),))


def ranks_at_item(gpus, ranks: int, samples: int, interval_s: float, probe, loop, hang_after_s) -> object:
    """`ranks` ranks caught at loss.item() in every sample, burning a CPU: their stacks read with
    native frames at the samples `probe(k)` names, their loop position `loop(k)` (None: no locals),
    on GPUs as `gpus(rank)` says (utilisation %, power W, memory utilisation %)."""
    bundle = node_bundle(0, 1, 0, T0, samples=samples, workers=0, ranks_per_node=ranks, interval_s=interval_s)
    rank_of = {p.pid: p.rank for p in bundle.job.ranks}
    snapshots = []
    for k, snapshot in enumerate(bundle.samples):
        rows = []
        for s in snapshot.processes:
            if s.pid in rank_of:
                frames = ITEM_NATIVE if probe(k) else ITEM_NATIVE[3:]
                proc = dataclasses.replace(s.proc, state="R", utime_s=100.0 + interval_s * k, stime_s=0.0)
                s = dataclasses.replace(s, proc=proc, stack=Stack(
                    (Thread(s.pid, "MainThread", True, True, frames, loop(k)),), native=probe(k), probe=probe(k)))
            rows.append(s)
        devices = tuple(device(rank_of[pid], pid, *gpus(rank_of[pid])) for pid in sorted(rank_of))
        snapshots.append(dataclasses.replace(snapshot, processes=tuple(rows),
                                             gpu=GpuState("ok", None, "580.1", devices)))
    return dataclasses.replace(bundle, samples=tuple(snapshots),
                               options=dataclasses.replace(bundle.options, hang_after_s=hang_after_s))


def eight_ranks_at_item(gpus) -> object:
    """Eight ranks blocked at loss.item() (probed natively, counters still for 20 s) on GPUs as `gpus` says."""
    return ranks_at_item(gpus, 8, 12, 2.0, probe=lambda k: k % 4 == 0, loop=lambda k: None, hang_after_s=15.0)


def test_seven_gpus_spinning_and_one_busy_name_the_busy_one():
    # GIVEN eight ranks at .item(): rank 5's GPU busy at full power, the others spinning at idle power
    bundle = eight_ranks_at_item(lambda r: (99, 690.0, 23) if r == 5 else (100, 125.0, 0))
    # WHEN judged
    report = judge(bundle).report
    # THEN rank 5 computes on its GPU and the seven wait: a hang whose culprit is rank 5
    states = {r.rank: r.state for r in report.ranks}
    assert states[5] == RankState.COMPUTE and all(states[r] == RankState.COLLECTIVE for r in states if r != 5)
    assert report.verdict == Verdict.HANG and report.culprit_ranks == (5,)


def test_seven_gpus_spinning_and_one_idle_at_the_same_sync_is_no_culprit_of_the_gpus():
    # GIVEN eight ranks at .item(): seven GPUs spinning at 100 %, one idle at 0 % (its rank is
    # at the same line: nothing queued on its stream)
    bundle = eight_ranks_at_item(lambda r: (0, 70.0, 0) if r == 3 else (100, 125.0, 0))
    report = judge(bundle).report
    # THEN every rank waits at the sync (the idle GPU is no work): a hang, and the report does
    # not call a spinning GPU work
    assert report.verdict == Verdict.HANG
    assert all(r.state == RankState.COLLECTIVE for r in report.ranks)
    assert all(r.gpu.activity != GpuActivity.BUSY for r in report.ranks if r.gpu is not None)



def two_ranks_stepping_at_item(gpus, samples: int = 24) -> object:
    """Two ranks stepping every sample, each caught at loss.item() (probed natively once), on GPUs
    as `gpus` says: a fast loop whose host waits at its sync most of each step."""
    def loop(k: int) -> LoopMark:
        return LoopMark((FrameMark("<module>", 120, "m"), FrameMark("train", 77, f"b{k}", (("step", 20 * k),))))

    return ranks_at_item(gpus, 2, samples, 1.0, probe=lambda k: k == 4, loop=loop, hang_after_s=None)


def test_a_gpu_straggler_reads_slow_with_the_busy_rank_named():
    # GIVEN two ranks at .item() every step: rank 1's GPU busy at full power (its extra forwards),
    # rank 0's spinning at idle power (NCCL waiting for rank 1's share of the collective)
    bundle = two_ranks_stepping_at_item(lambda r: (99, 690.0, 23) if r == 1 else (100, 125.0, 0))
    # WHEN judged
    report = judge(bundle).report
    # THEN the job is slow, rank 1 the straggler: rank 0 waits at its sync, rank 1 computes on its GPU
    assert report.verdict == Verdict.SLOW and report.culprit_ranks == (1,)
    assert report.slow is not None and report.slow.others_wait > 0.8


def test_two_ranks_whose_gpus_both_work_are_balanced():
    # GIVEN the same job with both GPUs busy (each rank waits on its own work): no straggler
    bundle = two_ranks_stepping_at_item(lambda r: (99, 690.0, 23))
    assert judge(bundle).report.verdict == Verdict.HEALTHY


def test_without_gpu_readings_a_sync_is_a_wait_on_every_rank_and_names_no_straggler():
    # GIVEN the same job, its GPUs unread (NVML unavailable): every rank waits at .item() alike
    bundle = two_ranks_stepping_at_item(lambda r: (None, None, None))
    report = judge(bundle).report
    # THEN nothing is made up: not slow
    assert report.verdict == Verdict.HEALTHY


def test_without_gpu_readings_the_report_says_the_sync_was_read_as_a_wait():
    # GIVEN eight ranks at .item() with no GPU read (NVML unavailable), rank 5 waiting on its data
    bundle = eight_ranks_at_item(lambda r: (None, None, None))
    culprit = next(p.pid for p in bundle.job.ranks if p.rank == 5)
    samples = tuple(dataclasses.replace(s, gpu=GpuState("unavailable", "NVML not found"), processes=tuple(
        dataclasses.replace(p, stack=Stack((Thread(p.pid, "MainThread", False, False, DATALOADER_WAIT),)))
        if p.pid == culprit else p for p in s.processes)) for s in bundle.samples)
    # WHEN judged
    report = judge(dataclasses.replace(bundle, samples=samples)).report
    # THEN rank 5 is the culprit and the evidence says what was read as a wait, and why
    assert report.verdict == Verdict.HANG and report.culprit_ranks == (5,)
    straggler = next(f for f in report.findings if f.rule == "collective-straggler")
    assert any("no GPU was read" in line and "read as a wait" in line for line in straggler.evidence)


# --- the same through the real NVML bindings, against the fake libnvidia-ml (one GPU per rank) -----

@pytest.fixture
def nvml_of(fake_nvml_lib, tmp_path, monkeypatch):
    """GPU states read by hangdoc's NVML sampler from the fake library, one device per line given;
    pynvml's module globals are restored afterwards."""
    import pynvml

    from hangdoc.collect.gpu import sample_gpus

    saved = (pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache), pynvml._nvmlLib_refcount)
    pynvml.nvmlLib, pynvml._nvmlLib_refcount = None, 0
    pynvml._nvmlGetFunctionPointer_cache.clear()

    def read(devices: list[str]) -> GpuState:
        path = tmp_path / "fake_nvml.conf"
        path.write_text("driver=580.1\n" + "\n".join(devices) + "\n")
        monkeypatch.setenv("FAKE_NVML_CONFIG", str(path))
        return sample_gpus(library_path=str(fake_nvml_lib))

    yield read
    pynvml.nvmlLib, pynvml._nvmlLib_refcount = saved[0], saved[2]
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlGetFunctionPointer_cache.update(saved[1])


def nvml_line(index: int, pid: int, util: int, mem_util: int, power_w: int) -> str:
    return (f"device name=NVIDIA-H100 uuid=GPU-{index} util={util} mem_util={mem_util} mem_total=85520809984 "
            f"mem_used=32212254720 power_mw={power_w * 1000} power_limit_mw=700000 sm_clock=1980 "
            f"sm_clock_max=1980 pids={pid}:32212254720")


@pytest.mark.parametrize("busy, idle", [(5, None), (None, 3)])
def test_eight_gpus_read_through_nvml_tell_the_rank_that_works(nvml_of, busy, idle):
    # GIVEN eight ranks at .item(), their GPUs read through the real bindings: seven spinning at
    # 100 % and 125 W, and either one busy at full power (a kernel that never ends) or one idle
    bundle = eight_ranks_at_item(lambda r: (100, 125.0, 0))
    pids = {p.rank: p.pid for p in bundle.job.ranks}

    def reading(rank: int) -> tuple[int, int, int]:
        return (99, 23, 690) if rank == busy else (0, 0, 70) if rank == idle else (100, 0, 125)

    state = nvml_of([nvml_line(r, pids[r], *reading(r)) for r in range(8)])
    assert state.available and len(state.devices) == 8
    bundle = dataclasses.replace(bundle, samples=tuple(dataclasses.replace(s, gpu=state) for s in bundle.samples))
    # WHEN judged
    report = judge(bundle).report
    # THEN the busy rank computes on its GPU and is the culprit; an idle GPU at the same sync is no work
    assert report.verdict == Verdict.HANG
    if busy is not None:
        assert report.culprit_ranks == (busy,)
        assert next(r for r in report.ranks if r.rank == busy).state == RankState.COMPUTE
    else:
        assert all(r.state == RankState.COLLECTIVE for r in report.ranks)
        assert next(r for r in report.ranks if r.rank == idle).gpu.activity == GpuActivity.IDLE
