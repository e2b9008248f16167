"""A watch round's second, closer read of a few processes (live/watcher.py: `_read_late`) reads
those processes in full and nothing of the node the round read already: no GPU, no /dev/shm, no
quota, and the sockets' reader counts no new capture. Over a real process: a sleeping child."""
from __future__ import annotations

import subprocess
import sys

from factories import wait_until
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.snapshot import Probes, capture
from hangdoc.model import GpuState, Job, ProcessInfo, Role


def _job(pid: int) -> Job:
    procfs = ProcFS()
    worker = ProcessInfo(pid, 1, Role.WORKER, ("python", "train.py"), sys.executable, procfs.stat(pid).start_time,
                         {}, 0, 0, 0, 1, pid, 0)
    return Job(None, None, None, 1, None, (worker,))


def test_a_close_read_within_a_round_reads_the_process_in_full_and_nothing_of_the_node():
    # GIVEN a sleeping process taken for a DataLoader worker, and probes that count the GPU readings
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert wait_until(lambda: ProcFS().proc_stat(child.pid).state == "S")
        gpu_reads = []
        probes = Probes(pyspy=None, gpu=lambda: gpu_reads.append(1) or GpuState("unavailable", "test"))
        job = _job(child.pid)
        # WHEN the round reads it, then reads it again within the round
        round_read, _ = capture(job, probes)
        captures = probes.sockets.captures
        closer, _ = capture(job, probes, within=True)
        # THEN the round read the node (its GPU once), the closer read only the process, in full
        assert len(gpu_reads) == 1
        assert closer.shm is None and closer.cpu_quota is None and closer.gpu.status == "unavailable"
        assert probes.sockets.captures == captures
        [sample] = closer.processes
        assert sample.alive and sample.proc is not None and sample.proc.full and sample.proc.syscall not in (None, "running")
    finally:
        child.kill()
        child.wait(timeout=10)
