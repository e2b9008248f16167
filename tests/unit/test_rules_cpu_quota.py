"""A throttled worker is not a stalled one: on a hang whose culprit waits on its DataLoader while
the job's cgroup CPU quota throttles its running workers, cpu-quota-throttled names the quota and
dataloader-stall stands back for that rank; a worker stalled at no CPU is still dataloader-stall's."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from hangdoc.bundle.files import load_bundle
from hangdoc.live.replay import replay
from hangdoc.model import Bundle, CpuQuota, Role
from hangdoc.report.judge import judge

HERE = Path(__file__).resolve().parents[1]
THROTTLED_WATCH = (HERE / "replay" /
                   "live-pipeline-resources-a-cpu-quota-that-throttles-a-data-bound-job-is-named-with-its-share")
STUCK_FETCH = HERE / "golden" / "stuck-fetch" / "bundle.json"


def under_quota(bundle: Bundle, cores: float = 0.2, throttled_share: float = 0.9) -> Bundle:
    """The bundle with every sample under a CPU quota of `cores`, its cpu.stat counting 10 periods a
    second and throttled in `throttled_share` of them."""
    t0 = bundle.samples[0].time
    samples = []
    for s in bundle.samples:
        periods = int(10 * (s.time - t0))
        quota = CpuQuota("/job", cores, 100 + periods, int(throttled_share * periods), 0.5 * (s.time - t0))
        samples.append(dataclasses.replace(s, cpu_quota=quota))
    return dataclasses.replace(bundle, samples=tuple(samples))


def workers_running(bundle: Bundle, rank: int, cores_each: float) -> Bundle:
    """The bundle with the rank's DataLoader workers using `cores_each` CPUs each, all along."""
    workers = {p.pid for p in bundle.job.processes if p.role is Role.WORKER and p.rank == rank}
    t0 = bundle.samples[0].time
    samples = []
    for s in bundle.samples:
        used = cores_each * (s.time - t0)
        procs = tuple(dataclasses.replace(p, proc=dataclasses.replace(p.proc, utime_s=p.proc.utime_s + used))
                      if p.pid in workers and p.proc is not None else p for p in s.processes)
        samples.append(dataclasses.replace(s, processes=procs))
    return dataclasses.replace(bundle, samples=tuple(samples))


def fired(report) -> dict[str, tuple[int, ...]]:
    return {f.rule: f.ranks for f in report.findings}


def test_a_recorded_watch_of_a_throttled_job_judged_at_a_tight_bound_names_the_quota_not_a_stalled_worker():
    # GIVEN the recorded watch of a data-bound job under a quota of 0.2 CPUs (a step takes about 17 s)
    # WHEN it is replayed with --hang-after 4
    report = replay(THROTTLED_WATCH, hang_after=4.0).report
    # THEN a hang by the bound given, of rank 0 waiting on its DataLoader ...
    assert report.verdict == "hang" and list(report.culprit_ranks) == [0]
    # ... whose cause is the quota, with its figures and the workers that run under it
    quota = next(f for f in report.findings if f.rule == "cpu-quota-throttled")
    assert quota.ranks == (0,) and quota.severity.value == "critical"
    assert "CPU quota (0.2 CPUs) throttles its workers" in quota.title
    assert any("a CPU quota of 0.2 CPUs; throttled in" in e for e in quota.evidence)
    assert sum("running, throttled by the quota, not stalled" in e for e in quota.evidence) == 2
    assert any("2 ranks and 4 DataLoader workers share the quota's 0.2 CPUs" in e for e in quota.evidence)
    assert "--hang-after of 4 s" in quota.fix
    # AND no finding says no worker delivers; the straggler finding points at the quota's
    assert "dataloader-stall" not in fired(report)
    straggler = next(f for f in report.findings if f.rule == "collective-straggler")
    assert "follow the fix of the cpu-quota-throttled finding above" in straggler.fix
    assert [f.rule for f in report.findings].index("cpu-quota-throttled") < [f.rule for f in report.findings].index(
        "collective-straggler")


def test_a_hang_whose_waiting_rank_s_workers_run_under_a_throttled_quota_is_the_quota_s():
    # GIVEN rank 1 waiting on its DataLoader (stuck-fetch), its two workers using 0.08 CPUs each,
    # in a cgroup whose quota of 0.2 CPUs runs out in 90 % of periods
    bundle = under_quota(workers_running(load_bundle(STUCK_FETCH), rank=1, cores_each=0.08))
    # WHEN it is judged
    report = judge(bundle).report
    # THEN a hang of rank 1, named by cpu-quota-throttled, and dataloader-stall does not claim rank 1
    assert report.verdict == "hang" and list(report.culprit_ranks) == [1]
    assert fired(report).get("cpu-quota-throttled") == (1,)
    assert "dataloader-stall" not in fired(report)


def test_a_worker_stalled_at_no_cpu_without_throttling_is_still_a_dataloader_stall():
    # GIVEN rank 1 waiting on its DataLoader, its workers asleep in recv() at no CPU, no quota (stuck-fetch)
    report = judge(load_bundle(STUCK_FETCH)).report
    # WHEN judged THEN dataloader-stall names rank 1 and cpu-quota-throttled stays quiet
    assert fired(report).get("dataloader-stall") == (1,)
    assert "cpu-quota-throttled" not in fired(report)


def test_a_worker_stalled_at_no_cpu_under_a_throttled_quota_is_still_a_dataloader_stall():
    # GIVEN the same stalled workers, in a cgroup whose quota runs out in 90 % of periods
    # (something else in it uses the quota: not the workers, which use none)
    report = judge(under_quota(load_bundle(STUCK_FETCH))).report
    # WHEN judged THEN the quota is not what holds them: dataloader-stall names rank 1
    assert fired(report).get("dataloader-stall") == (1,)
    assert "cpu-quota-throttled" not in fired(report)


def test_a_quota_that_never_runs_out_leaves_running_workers_to_dataloader_stall():
    # GIVEN rank 1's workers running, under a quota that is throttled in no period
    bundle = under_quota(workers_running(load_bundle(STUCK_FETCH), rank=1, cores_each=0.08), throttled_share=0.0)
    # WHEN judged THEN no quota is named
    report = judge(bundle).report
    assert "cpu-quota-throttled" not in fired(report)
    assert fired(report).get("dataloader-stall") == (1,)
