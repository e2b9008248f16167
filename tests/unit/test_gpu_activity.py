"""What a GPU reading means (hangdoc.analyze.gpu), on NVML series recorded from a real H200.

tests/gpu/recorded/h200-shapes.json holds 10 s of hangdoc's own NVML samples (every 0.25 s) of
one process in each shape (tests/gpu/device_check.py): a bf16 matrix-product loop, an idle CUDA
context, a kernel spinning on a flag in GPU memory (NCCL's shape of a wait), torch's clock-spin.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hangdoc.model.gpu import gpu_activity
from hangdoc.bundle.files import load_bundle
from hangdoc.model import GpuActivity, GpuDevice
from hangdoc.report import judge

ROOT = Path(__file__).resolve().parents[1]
RECORDED = json.loads((ROOT / "gpu" / "recorded" / "h200-shapes.json").read_text())
EXPECTED = {"matmul": GpuActivity.BUSY, "idle": GpuActivity.IDLE, "spin": GpuActivity.SPIN, "sleep": GpuActivity.SPIN}


def device(util=None, mem_util=None, power=None, limit=None) -> GpuDevice:
    return GpuDevice(index=0, uuid="GPU-0", name="H200", utilization_pct=util, memory_util_pct=mem_util,
                     memory_used_bytes=None, memory_total_bytes=None, power_w=power, power_limit_w=limit,
                     sm_clock_mhz=None, sm_clock_max_mhz=None)


def row_device(row: dict) -> GpuDevice:
    return device(row["util"], row["mem_util"], row["power_w"], row["limit_w"])


@pytest.mark.parametrize("shape", sorted(EXPECTED))
def test_every_recorded_sample_of_a_shape_reads_as_that_shape(shape):
    # GIVEN 40 samples of one process's GPU on a real H200
    rows = RECORDED["shapes"][shape]["rows"]
    assert len(rows) >= 30
    # WHEN each is read THEN every one of them says what the process did
    assert {gpu_activity(row_device(r)) for r in rows} == {EXPECTED[shape]}


def test_utilisation_alone_does_not_tell_work_from_a_spin():
    # GIVEN the recorded matrix products and the recorded spin
    work = RECORDED["shapes"]["matmul"]["rows"]
    spin = RECORDED["shapes"]["spin"]["rows"]
    # THEN both read 99-100 % (why hangdoc needs power and memory traffic beside utilisation)
    assert min(r["util"] for r in work + spin) >= 99
    # AND the spin draws what an idle context draws, work draws near the limit
    idle = RECORDED["shapes"]["idle"]["rows"]
    assert max(r["power_w"] for r in spin) < 1.05 * max(r["power_w"] for r in idle)
    assert min(r["power_w"] for r in work) > 0.9 * work[0]["limit_w"]


@pytest.mark.parametrize("reading, expected", [
    (device(), None),                                       # no utilisation: nothing to say
    (device(util=5), GpuActivity.IDLE),
    (device(util=60), GpuActivity.BUSY),                    # part-time kernels: busy whatever the power
    (device(util=100), None),                               # always busy, power unknown: work or spin?
    (device(util=100, mem_util=0, power=125.0), None),      # no limit to compare with
    (device(util=100, mem_util=0, power=125.0, limit=700.0), GpuActivity.SPIN),
    (device(util=100, mem_util=5, power=125.0, limit=700.0), GpuActivity.BUSY),   # memory moves: work
    (device(util=100, mem_util=0, power=300.0, limit=700.0), GpuActivity.BUSY),   # draws power: work
])
def test_a_busy_reading_is_called_a_spin_only_when_every_sign_agrees(reading, expected):
    assert gpu_activity(reading) == expected


def spinning_gpu(bundle):
    """The recorded gpu-gloo-cuda bundle with its GPU read as the spin on the H200 read."""
    spin = RECORDED["shapes"]["spin"]["rows"][0]
    last = bundle.samples[-1]
    devices = tuple(dataclasses.replace(d, utilization_pct=spin["util"], memory_util_pct=spin["mem_util"],
                                        power_w=spin["power_w"]) for d in last.gpu.devices)
    gpu = dataclasses.replace(last.gpu, devices=devices)
    return dataclasses.replace(bundle, samples=bundle.samples[:-1] + (dataclasses.replace(last, gpu=gpu),))


def test_the_straggler_finding_says_the_waiting_ranks_gpu_spins_and_the_table_marks_it():
    # GIVEN the 2-rank job recorded on a real GPU (rank 1 stalled in its DataLoader, rank 0 in
    # all_reduce), its one GPU read as a spin kernel reads
    bundle = spinning_gpu(load_bundle(ROOT / "golden" / "gpu-gloo-cuda" / "bundle.json"))
    # WHEN it is diagnosed
    report = judge(bundle).report
    straggler = next(f for f in report.findings if f.rule == "collective-straggler")
    # THEN the evidence says the waiting rank's 100 % is a spin, not work
    assert any(line.startswith("the GPU of rank 0 reads 100 % at 125 W of 700 W with no memory traffic")
               for line in straggler.evidence), straggler.evidence
    # AND the rank's GPU is marked spin in the report
    assert {r.gpu.activity for r in report.ranks} == {GpuActivity.SPIN}


def test_the_recorded_job_as_it_was_reads_idle_gpus():
    # GIVEN the recorded job as hangdoc saw it (a tiny model: the GPU idle between steps)
    report = judge(load_bundle(ROOT / "golden" / "gpu-gloo-cuda" / "bundle.json")).report
    straggler = next(f for f in report.findings if f.rule == "collective-straggler")
    # THEN nothing claims a spin, and the culprit's GPU is said to be idle
    assert {r.gpu.activity for r in report.ranks} == {GpuActivity.IDLE}
    assert any(line.startswith("rank 1's GPU 0 is idle (0 %, ") for line in straggler.evidence)
