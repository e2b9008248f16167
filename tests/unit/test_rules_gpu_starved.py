"""gpu-starved with and without GPU data: the slow-data golden bundle, with NVML samples added."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from hangdoc.report import judge
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Bundle, GpuDevice, GpuProcess, GpuState, Severity

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def with_gpus(bundle: Bundle, utilisation: list[int]) -> Bundle:
    """One GPU per rank; sample i reads utilisation[i % len] on every GPU."""
    samples = []
    for i, snap in enumerate(bundle.samples):
        devices = tuple(
            GpuDevice(index=r.rank, uuid=f"GPU-{r.rank}", name="NVIDIA H100 80GB HBM3",
                      utilization_pct=utilisation[i % len(utilisation)], memory_util_pct=None,
                      memory_used_bytes=None, memory_total_bytes=None, power_w=None, power_limit_w=None,
                      sm_clock_mhz=None, sm_clock_max_mhz=None, processes=(GpuProcess(r.pid, None),))
            for r in bundle.job.ranks)
        samples.append(dataclasses.replace(snap, gpu=GpuState("ok", None, "550.54", devices)))
    return dataclasses.replace(bundle, samples=tuple(samples))


def starved(bundle: Bundle):
    return [f for f in judge(bundle).report.findings if f.rule == "gpu-starved"]


def test_without_gpus_it_says_so_and_judges_on_the_wait_share():
    # GIVEN the real slow-data job, watched with --no-gpu
    bundle = load_bundle(GOLDEN / "slow-data" / "bundle.json")
    # WHEN the rules run
    [finding] = starved(bundle)
    # THEN a warning from the dataloader-wait share alone, saying GPU data is unavailable
    assert finding.severity is Severity.WARNING
    assert any(e.startswith("GPU data unavailable") for e in finding.evidence)
    assert any("waiting in DataLoader.__next__ in" in e for e in finding.evidence)
    assert any("-core host" in e for e in finding.evidence)


def test_bursty_gpus_are_cited_per_device():
    # GIVEN the same job with GPUs at 0 % most of the time and bursts of 75 %
    bundle = with_gpus(load_bundle(GOLDEN / "slow-data" / "bundle.json"), [0, 0, 75, 0])
    # WHEN the rules run
    [finding] = starved(bundle)
    # THEN each GPU's mean, idle samples and peak are evidence, and nothing says "unavailable"
    gpu0 = next(e for e in finding.evidence if e.startswith("GPU0 (rank 0)"))
    assert "mean 19% utilisation" in gpu0 and "peak 75%" in gpu0
    assert not any("unavailable" in e for e in finding.evidence)


def test_busy_gpus_are_not_starved():
    # GIVEN the same wait share but GPUs at 95 %
    bundle = with_gpus(load_bundle(GOLDEN / "slow-data" / "bundle.json"), [95])
    # THEN no gpu-starved finding
    assert starved(bundle) == []


def test_a_hang_is_not_gpu_starved():
    # GIVEN a hung job whose culprit waits for data
    bundle = load_bundle(GOLDEN / "bz2-shards" / "bundle.json")
    # THEN the hang rules speak, not gpu-starved
    assert starved(bundle) == []


def test_workers_that_wait_on_io_are_told_more_workers_help_past_the_cores():
    # GIVEN the real tiny-files job: a file per clip, 25 ms an open, 2 workers per rank on 2 cores
    bundle = load_bundle(GOLDEN / "tiny-files" / "bundle.json")
    # WHEN the rules run
    [finding] = starved(bundle)
    # THEN each worker's line is the job's own open, and the fix says they wait, not compute
    assert all("mostly at open_clip (hangdoc/scenarios/files.py:" in e
               for e in finding.evidence if " worker " in e and "core busy" in e)
    assert "they wait, most often at open_clip" in finding.fix and "past the core count" in finding.fix
    assert "more workers will not help" not in finding.fix


def test_workers_that_compute_on_every_core_are_told_to_make_samples_cheaper():
    # GIVEN the real slow-data job: one worker per rank computing an augmentation, ~60 % of a core each
    [finding] = starved(load_bundle(GOLDEN / "slow-data" / "bundle.json"))
    # THEN the fix says more workers will not help, and names the line they compute at
    assert "more workers will not help" in finding.fix and "they wait" not in finding.fix
    assert any("mostly at busy_for (hangdoc/scenarios/train.py:" in e for e in finding.evidence)


def test_a_straggler_waiting_on_its_data_is_not_the_job_starved():
    # GIVEN the real bz2-straggler job: rank 1 waits on its bz2 workers, rank 0 waits for rank 1
    report = judge(load_bundle(GOLDEN / "bz2-straggler" / "bundle.json")).report
    # THEN slow-rank names the straggler and slow-decompression says why; gpu-starved stays quiet
    rules = [f.rule for f in report.findings]
    assert "gpu-starved" not in rules and {"slow-rank", "slow-decompression"} <= set(rules)
