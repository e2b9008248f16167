"""The ranks' CPU quota and /dev/shm, read from a /proc and a cgroup tree written under tmp_path."""
from __future__ import annotations

from hangdoc.collect.resources import cpu_quota, shm_use
from hangdoc.model import Job, ProcessInfo, Role


def job_of(pid: int) -> Job:
    rank = ProcessInfo(pid=pid, ppid=1, role=Role.RANK, cmdline=("python",), exe=None, start_time=0.0, rank=0)
    return Job(run_id=None, master_addr=None, master_port=None, world_size=1, launcher_pid=None, processes=(rank,))


def write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_v2_quota_set_on_a_parent_is_the_one_read_with_its_throttling(tmp_path):
    # GIVEN a rank in /kubepods/pod1/ctr whose pod (the parent) has cpu.max 150000 100000
    write(tmp_path / "proc/42/cgroup", "0::/kubepods/pod1/ctr\n")
    cg = tmp_path / "cgroup"
    write(cg / "cgroup.controllers", "cpu memory\n")
    write(cg / "kubepods/pod1/ctr/cpu.max", "max 100000\n")
    write(cg / "kubepods/pod1/cpu.max", "150000 100000\n")
    write(cg / "kubepods/pod1/cpu.stat", "usage_usec 9\nnr_periods 200\nnr_throttled 150\nthrottled_usec 2500000\n")
    # WHEN its quota is read
    quota = cpu_quota(job_of(42), tmp_path / "proc", cg)
    # THEN it is the pod's, 1.5 CPUs, with the pod's counters
    assert quota is not None and quota.cgroup == "/kubepods/pod1" and quota.cores == 1.5
    assert (quota.periods, quota.throttled_periods, quota.throttled_s) == (200, 150, 2.5)


def test_a_v1_quota_is_read_and_no_quota_reads_as_none(tmp_path):
    # GIVEN a v1 cpu hierarchy: the rank's cgroup /job has a quota of half a CPU, another has none (-1)
    write(tmp_path / "proc/7/cgroup", "4:memory:/x\n2:cpu,cpuacct:/job\n0::/\n")
    write(tmp_path / "proc/8/cgroup", "2:cpu,cpuacct:/free\n")
    cg = tmp_path / "cgroup"
    write(cg / "cpu,cpuacct/job/cpu.cfs_quota_us", "50000\n")
    write(cg / "cpu,cpuacct/job/cpu.cfs_period_us", "100000\n")
    write(cg / "cpu,cpuacct/job/cpu.stat", "nr_periods 10\nnr_throttled 4\nthrottled_time 300000000\n")
    write(cg / "cpu,cpuacct/free/cpu.cfs_quota_us", "-1\n")
    write(cg / "cpu,cpuacct/free/cpu.cfs_period_us", "100000\n")
    write(cg / "cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
    write(cg / "cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    # WHEN read THEN the quota and its counters; none where none is set; none without a rank's /proc
    quota = cpu_quota(job_of(7), tmp_path / "proc", cg)
    assert quota is not None and (quota.cores, quota.throttled_periods, quota.throttled_s) == (0.5, 4, 0.3)
    assert cpu_quota(job_of(8), tmp_path / "proc", cg) is None
    assert cpu_quota(job_of(9), tmp_path / "proc", cg) is None


def test_dev_shm_is_read_through_the_rank_s_root(tmp_path):
    # GIVEN a rank whose root holds a dev/shm directory (a fake /proc: the directory's own filesystem)
    (tmp_path / "proc/5/root/dev/shm").mkdir(parents=True)
    # WHEN read THEN a size and a use; a rank whose root cannot be read has none
    shm = shm_use(job_of(5), tmp_path / "proc")
    assert shm is not None and shm.size_bytes > 0 and 0 <= shm.used_bytes <= shm.size_bytes
    assert shm_use(job_of(6), tmp_path / "proc") is None
