"""Record the rules' golden bundles from real torchrun jobs on this machine.

    .venv/bin/python tests/golden_record.py                  # record every case
    .venv/bin/python tests/golden_record.py bz2-shards ...   # record these cases
    .venv/bin/python tests/golden_record.py --markdown-only  # rewrite expected.md and expected.txt from the stored bundles
    .venv/bin/python tests/golden_record.py --expected-only  # rewrite expected.json from CASES (fire, look_alikes)
    .venv/bin/python tests/golden_record.py --docs           # rewrite the examples in hangdoc/rules/pages/*.md
    .venv/bin/python tests/golden_record.py --list
    .venv/bin/python tests/golden_record.py --replay [CASE...]  # record the watch of each real case for the replay tier

Each case starts a real 2-rank gloo job (a scenario of hangdoc/scenarios/, a mode of
tests/jobs/stall_job.py or of tests/jobs/rules_job.py), waits for its markers, runs
`python -m hangdoc watch LAUNCHER_PID --interval 0.5 --hang-after 4 --no-live --no-gpu
--format json --out ...` (healthy jobs: the same Watcher in-process, since watch saves no
bundle when nothing is found), always stops the job, trims the bundle to its last samples
and writes tests/golden/<case>/{bundle.json, expected.json, expected.md}. A derived case
edits another case's bundle where this machine cannot produce the real thing (see its README).
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hangdoc.report import judge  # noqa: E402
from hangdoc.bundle.files import load_bundle  # noqa: E402
from hangdoc.model import Bundle, LogTail, Role  # noqa: E402
from hangdoc.render.markdown import report_markdown  # noqa: E402
from hangdoc.render.text import render_text  # noqa: E402
from hangdoc.scenarios import SCENARIOS  # noqa: E402
from hangdoc.scenarios.data import make_shards, synth_wav, write_list  # noqa: E402
from hangdoc.scenarios.launch import RunningJob, start_job, stop_job, torchrun_cmd, wait_for  # noqa: E402
from hangdoc.base.serde import to_dict  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"
JOBS = ROOT / "tests" / "jobs"
TEXT_WIDTH = 120   # expected.txt: the text report as a 120-column terminal shows it, without colour
KEEP_SAMPLES = 12
KEEP_LOG_LINES = 400   # what the collector keeps: the whole tail
WATCH = ("--interval", "0.5", "--hang-after", "4", "--no-live", "--no-gpu", "--format", "json")


@dataclass(frozen=True)
class Case:
    name: str
    about: str
    verdict: str
    culprits: tuple[int, ...]
    fire: tuple[str, ...]
    start: Callable[[Path], tuple[list[str], list[Path]]] | None = None   # workdir -> (cmd, markers)
    timeout_s: float | None = None       # healthy jobs: how long to watch
    derive: tuple[str, Callable[[Bundle], Bundle]] | None = None   # (source case, edit)
    readme: str = ""
    device: bool = False                 # recorded on a GPU machine by tests/gpu/device_check.py, not here
    hang_after_s: float = 4.0            # the watch's --hang-after (a restarted job's new ranks start up longer)
    # The rules this case is a near miss for, which must stay quiet: those a naive reading would fire
    # (a healthy pause: slow-rank; a roomy /dev/shm: shm-exhausted), not every other rule.
    look_alikes: tuple[str, ...] = ()


def scenario(name: str, *, fault: bool = True, max_steps: int | None = None):
    def start(workdir: Path):
        s = SCENARIOS[name]
        s.prepare(workdir)
        markers = s.ready_markers(workdir) + ([s.fault_marker(workdir)] if fault else [])
        return s.command(workdir, max_steps=max_steps), markers
    return start


def stall_job(mode: str):
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "stall_job.py", "--workdir", str(workdir), "--mode", mode)
        return cmd, [workdir / "ready.0", workdir / "ready.1", workdir / "fault"]
    return start


def diverge_job(mode: str, nproc: int = 2):
    """A mode of tests/jobs/diverge_job.py: ranks that part ways in their own code."""
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "diverge_job.py", "--workdir", str(workdir), "--mode", mode, nproc=nproc)
        return cmd, [*(workdir / f"ready.{r}" for r in range(nproc)), workdir / "fault"]
    return start


def rules_job(mode: str, layout: str = "plain", *, fault: bool = True, fault_after: float = 6.0):
    """A mode of tests/jobs/rules_job.py; crash modes wait only for ready, so watch sees the fault."""
    def start(workdir: Path):
        data = workdir / "data"
        if layout == "bz2-rank0":   # shard i goes to rank i % 2: rank 0 draws the bz2 ones
            bz2 = make_shards(data, 2, 24, 1.0, "bz2", prefix="libri")
            plain = make_shards(data, 2, 24, 1.0, prefix="aishell")
            shards = [bz2[0], plain[0], bz2[1], plain[1]]
        else:
            shards = make_shards(data, 4, 24, 1.0, prefix="aishell")
        listing = write_list(shards, workdir / "data.list")
        (workdir / "raw.wav").write_bytes(synth_wav(1.0, seed=7))
        cmd = torchrun_cmd(JOBS / "rules_job.py", "--workdir", str(workdir), "--mode", mode,
                           "--data-list", str(listing), "--fault-after", str(fault_after))
        return cmd, [workdir / "ready.0", workdir / "ready.1"] + ([workdir / "fault"] if fault else [])
    return start


def exit_job(mode: str, *extra: str):
    """A mode of tests/jobs/exit_job.py: how a rank ends (crash modes wait only for ready, so watch sees it)."""
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "exit_job.py", "--workdir", str(workdir), "--mode", mode, *extra)
        return cmd, [workdir / "ready.0", workdir / "ready.1"]
    return start


def restarting_job(mode: str, *extra: str):
    """A mode of tests/jobs/exit_job.py under torchrun --max-restarts=1 (the elastic agent restarts
    the ranks once after a failure)."""
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "exit_job.py", "--workdir", str(workdir), "--mode", mode, *extra,
                           extra=("--standalone", "--max-restarts=1"))
        return cmd, [workdir / "ready.0", workdir / "ready.1"]
    return start


def own_waits_job(mode: str):
    """A mode of tests/jobs/own_waits_job.py: a hang in the job's own code (pdb, flock, a child, a thread)."""
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "own_waits_job.py", "--workdir", str(workdir), "--mode", mode)
        return cmd, [workdir / "ready.0", workdir / "ready.1", workdir / "fault"]
    return start


def pipeline_job(mode: str, *extra: str, fault: bool = True, env: tuple[str, ...] = (), shm_mb: int | None = None,
                 cpus: float | None = None):
    """A mode of tests/jobs/pipeline_job.py: a native pool used before fork, workers' CPUs, threads,
    /dev/shm, a CPU quota; `env`: NAME=VALUE settings the job starts with; `shm_mb`: a /dev/shm of that
    size of its own (a tmpfs in a mount namespace); `cpus`: a cgroup CPU quota of that many CPUs (both
    need root, as in a container)."""
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "pipeline_job.py", "--workdir", str(workdir), "--mode", mode, *extra)
        cmd = ["env", *env, *cmd] if env else cmd
        if shm_mb is not None:
            cmd = own_shm(cmd, shm_mb)
        if cpus is not None:
            cmd = in_cpu_quota(cmd, cpus)
        return cmd, [workdir / "ready.0", workdir / "ready.1"] + ([workdir / "fault"] if fault else [])
    return start


def own_shm(cmd: list[str], size_mb: int) -> list[str]:
    """`cmd` in a mount namespace of its own whose /dev/shm is a tmpfs of `size_mb` MB (Docker's is 64)."""
    return ["unshare", "-m", "sh", "-c",
            f"mount -t tmpfs -o size={size_mb}m tmpfs /dev/shm && exec {shlex.join(cmd)}"]


def in_cpu_quota(cmd: list[str], cpus: float, name: str = "hangdoc-golden-quota") -> list[str]:
    """`cmd` in a cgroup of its own whose CPU quota is `cpus` CPUs (cgroup v1's cpu hierarchy, else v2)."""
    period = 100_000
    v1 = Path("/sys/fs/cgroup/cpu")
    group = (v1 if v1.is_dir() else Path("/sys/fs/cgroup")) / name
    group.mkdir(exist_ok=True)
    if v1.is_dir():
        (group / "cpu.cfs_period_us").write_text(str(period))
        (group / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
    else:
        (group / "cpu.max").write_text(f"{int(cpus * period)} {period}")
    return ["sh", "-c", f"echo $$ > {group / 'cgroup.procs'} && exec {shlex.join(cmd)}"]


def on_aarch64(bundle: Bundle) -> Bundle:
    """The x86 segfault as a Kunpeng host shows it: aarch64, OpenMP and ACL mapped in every process."""
    arm_libs = ("/opt/arm/acl/lib/libarm_compute.so",)

    def edit(proc):
        if proc.role in (Role.RANK, Role.WORKER):
            return dataclasses.replace(proc, libs=tuple(sorted(set(proc.libs) | set(arm_libs))))
        return proc

    job = dataclasses.replace(bundle.job, processes=tuple(edit(p) for p in bundle.job.processes))
    host = dataclasses.replace(bundle.host, arch="aarch64", hostname=bundle.host.hostname + "-kunpeng")
    return dataclasses.replace(bundle, host=host, job=job)


CASES = [
    Case("bz2-shards", "rank 1's workers decompress .tar.bz2 shards by random access; rank 0 waits",
         "hang", (1,), ("slow-decompression", "collective-straggler"), scenario("bz2-shards"),
         look_alikes=("dataloader-stall", "tar-member-decode")),
    Case("tar-stream-decode", "rank 1 decodes per-channel audio straight from bz2 tar member files",
         "hang", (1,), ("tar-member-decode", "collective-straggler"), scenario("tar-stream-decode"),
         look_alikes=("slow-decompression", "dataloader-stall")),
    Case("tar-stream-error", "a rank-1 worker decodes from a streamed tar member: '_Stream' has no seekable",
         "crash", (1,), ("tar-member-decode", "worker-error"), rules_job("tar-stream", fault=False, fault_after=10),
         look_alikes=("worker-died", "slow-decompression")),
    Case("uneven-shards", "5 shards over 2 ranks x 2 workers: rank 1 reaches the epoch barrier first",
         "hang", (1,), ("uneven-shards", "collective-mismatch"), scenario("uneven-shards"),
         look_alikes=("collective-straggler",)),
    Case("barrier-mismatch", "stall_job: rank 1 calls barrier() mid-epoch while rank 0 is in all_reduce",
         "hang", (1,), ("collective-mismatch",), stall_job("mismatch"),
         look_alikes=("uneven-shards", "collective-straggler")),
    Case("diverge-swallowed", "diverge_job: rank 1's metrics gather raises inside `try/except: continue`; it "
         "skips the gather and goes on to the next step's all-reduce", "hang", (1,), ("collective-mismatch",),
         diverge_job("swallow"), look_alikes=("collective-straggler",)),
    Case("diverge-early-stop", "diverge_job: early stopping on each rank's own validation loss; rank 2 stops",
         "hang", (2,), ("collective-mismatch",), diverge_job("earlystop", 3),
         look_alikes=("uneven-shards", "collective-straggler")),
    Case("diverge-handler", "diverge_job: rank 2's bad batch reaches an `except` that broadcasts a checkpoint name",
         "hang", (2,), ("collective-mismatch",), diverge_job("handler", 3), look_alikes=("collective-straggler",)),
    Case("diverge-ddp-validation", "diverge_job: rank 0 validates alone through the DDP wrapper (buffer broadcast)",
         "hang", (0,), ("collective-mismatch",), diverge_job("ddpval", 3), look_alikes=("collective-straggler",)),
    Case("diverge-clock", "diverge_job: a checkpoint every 2 s by each rank's own clock; rank 0's comes due first",
         "hang", (0,), ("collective-mismatch",), diverge_job("clock"),
         look_alikes=("collective-straggler", "uneven-shards")),
    Case("diverge-rank0-gather", "diverge_job: `if rank == 0: dist.all_gather_object(...)`",
         "hang", (0,), ("collective-mismatch",), diverge_job("rank0gather"), look_alikes=("collective-straggler",)),
    Case("diverge-early-return", "diverge_job: a metrics helper returns early on rank 1, which has no metrics",
         "hang", (1,), ("collective-mismatch",), diverge_job("earlyreturn"), look_alikes=("collective-straggler",)),
    Case("worker-segfault", "a rank-1 worker segfaults (x86_64): the job crashes",
         "crash", (1,), ("worker-died",), scenario("worker-segfault", fault=False),
         look_alikes=("fork-unsafe-arm", "rank-died")),
    Case("worker-segfault-aarch64", "the worker-segfault bundle as an aarch64 host with OpenMP/ACL shows it",
         "crash", (1,), ("worker-died", "fork-unsafe-arm"),
         derive=("worker-segfault", on_aarch64),
         readme="Hand-derived from ../worker-segfault/bundle.json (a real x86_64 segfault): "
                "host.arch set to aarch64, hostname suffixed -kunpeng, libarm_compute added to the "
                "ranks' and workers' libs (torch's libgomp is mapped already). No aarch64 machine was available.",
         look_alikes=("rank-died",)),
    Case("gpu-gloo-cuda", "2 ranks on one real H200, gloo carrying CUDA tensors: rank 1's workers never return "
         "a sample, rank 0 waits in all_reduce (watched with --native)",
         "hang", (1,), ("dataloader-stall", "collective-straggler"), device=True,
         look_alikes=("worker-deadlock", "gpu-starved")),
    Case("worker-oom", "a rank-1 worker is SIGKILLed, as the OOM killer does",
         "crash", (1,), ("worker-died",), rules_job("worker-oom", fault=False, fault_after=10),
         look_alikes=("rank-died", "shm-exhausted")),
    Case("worker-keyerror", "a rank-1 worker raises KeyError: 'sample_rate' (decode sets it in one branch)",
         "crash", (1,), ("worker-error",), rules_job("worker-keyerror", fault=False, fault_after=10),
         look_alikes=("worker-died", "tar-member-decode")),
    Case("worker-deadlock", "rank 1's workers take a lock that was held when they were forked",
         "hang", (1,), ("worker-deadlock", "collective-straggler"), scenario("worker-deadlock"),
         look_alikes=("worker-native-lock", "dataloader-stall", "file-lock-wait")),
    Case("gomp-fork", "rank 1 runs an OpenMP region (libgomp) before its DataLoader forks; its worker 0 runs one "
         "after the fork and waits for ever for the pool's threads",
         "hang", (1,), ("worker-native-lock", "collective-straggler"), pipeline_job("gomp-fork"),
         look_alikes=("worker-deadlock", "dataloader-stall", "fork-unsafe-arm")),
    Case("workers-pinned", "every DataLoader worker pins itself to the first CPU in worker_init_fn (as llvm-openmp 16 "
         "does to a forked worker): 4 workers share one core, both ranks wait on their data",
         "slow", (), ("workers-cpu-confined", "gpu-starved"), pipeline_job("pinned", fault=False), timeout_s=20,
         look_alikes=("cpu-quota-throttled", "threads-oversubscribed", "slow-rank")),
    Case("workers-unpinned", "the workers-pinned job with the workers' CPUs left alone: 4 workers on 2 shared cores, "
         "the ranks wait on their data (rank 0 most: the straggler here), the workers are not confined",
         "slow", (0,), ("slow-rank",), pipeline_job("plain", fault=False), timeout_s=20,
         look_alikes=("workers-cpu-confined", "gpu-starved")),
    Case("omp-oversubscribed", "OMP_NUM_THREADS=8 for 2 ranks that multiply matrices every step, on a 2-core node",
         "healthy", (), ("threads-oversubscribed",),
         pipeline_job("compute", "--workers", "1", fault=False, env=("OMP_NUM_THREADS=8",)), timeout_s=14,
         look_alikes=("cpu-quota-throttled", "slow-rank")),
    Case("omp-one-thread", "the omp-oversubscribed job with OMP_NUM_THREADS=1 (torchrun's default): one thread a CPU",
         "healthy", (), (), pipeline_job("compute", "--workers", "1", fault=False, env=("OMP_NUM_THREADS=1",)),
         timeout_s=14, look_alikes=("threads-oversubscribed",)),
    Case("shm-small", "a 16 MB /dev/shm of the job's own; after 6 s the workers hand over 8 MB batches: "
         "'unable to allocate shared memory', the job crashes (the rank that fails first, 1 here, is the culprit)",
         "crash", (1,), ("shm-exhausted", "worker-error"),
         pipeline_job("big-batches", "--sample-mb", "2", "--fault-after", "6", fault=False, shm_mb=16),
         look_alikes=("worker-died", "rank-died")),
    Case("shm-roomy", "the shm-small job with the machine's /dev/shm: the 8 MB batches fit, the job runs on",
         "healthy", (), (), pipeline_job("big-batches", "--sample-mb", "2", "--fault-after", "6", fault=False),
         timeout_s=14, look_alikes=("shm-exhausted",)),
    Case("cpu-quota", "a cgroup CPU quota of 0.2 CPUs over 2 ranks x 2 workers of CPU-heavy loading: throttled most "
         "periods, every rank waits on its data",
         "slow", (), ("cpu-quota-throttled", "gpu-starved"), pipeline_job("plain", fault=False, cpus=0.2),
         timeout_s=20, look_alikes=("workers-cpu-confined", "threads-oversubscribed", "slow-rank")),
    Case("cpu-quota-roomy", "the cpu-quota job under a quota of 4 CPUs, more than the node has: never throttled",
         "slow", (), ("gpu-starved",), pipeline_job("plain", fault=False, cpus=4), timeout_s=20,
         look_alikes=("cpu-quota-throttled", "workers-cpu-confined")),
    Case("tokenizers-fork", "rank 1 tokenizes a batch (Hugging Face tokenizers, TOKENIZERS_PARALLELISM=true) before its "
         "DataLoader forks; its worker 0 tokenizes after the fork and waits for ever for the rayon pool",
         "hang", (1,), ("worker-native-lock", "collective-straggler"),
         pipeline_job("tokenizers-fork", env=("TOKENIZERS_PARALLELISM=true",)),
         look_alikes=("worker-deadlock", "dataloader-stall", "threads-oversubscribed")),
    Case("stuck-fetch", "a rank-1 worker sleeps in recv() on a store that never answers",
         "hang", (1,), ("dataloader-stall", "collective-straggler"), rules_job("stuck-fetch"),
         look_alikes=("worker-deadlock", "worker-native-lock", "helper-thread-died")),
    Case("compute-straggler", "rank 1 loops in heavy_compute(); its workers idle on their index queues",
         "hang", (1,), ("collective-straggler",), scenario("compute-straggler"),
         look_alikes=("dataloader-stall", "worker-deadlock", "flight-recorder", "slow-rank")),
    Case("fr-straggler", "compute-straggler with TORCH_FR_BUFFER_SIZE: both ranks dump their Flight Recorder",
         "hang", (1,), ("flight-recorder", "collective-straggler"), scenario("fr-straggler"),
         look_alikes=("collective-mismatch", "dataloader-stall")),
    Case("bz2-bystander", "rank 0 reads .tar.bz2 shards and waits; rank 1 loops in heavy_compute()",
         "hang", (1,), ("collective-straggler",), rules_job("bz2-bystander", "bz2-rank0"),
         look_alikes=("slow-decompression", "worker-deadlock", "dataloader-stall")),
    Case("slow-data", "one worker per rank, CPU-heavy augmentation: ranks mostly wait for data",
         "healthy", (), ("gpu-starved",), scenario("slow-data", fault=False, max_steps=400), timeout_s=12,
         look_alikes=("collective-straggler", "dataloader-stall", "slow-rank")),
    Case("compute-2x", "rank 1 computes 1.0 s a step, rank 0 0.5 s: rank 0 waits in the gradient all_reduce half of each step",
         "slow", (1,), ("slow-rank",), scenario("compute-2x", fault=False, max_steps=400), timeout_s=30,
         look_alikes=("collective-straggler",)),
    Case("longer-samples", "a token corpus sorted by length cut into contiguous chunks: rank 1's samples are 2.3x "
         "longer; slow, and the report says its inputs are bigger",
         "slow", (1,), ("slow-rank",), scenario("longer-samples", fault=False, max_steps=300), timeout_s=30,
         look_alikes=("uneven-shards", "collective-straggler")),
    Case("bz2-straggler", "rank 1 reads .tar.bz2 shards of 30 s clips in order: late every step, never stalled",
         "slow", (1,), ("slow-decompression", "slow-rank"), scenario("bz2-straggler", fault=False, max_steps=400),
         timeout_s=30, look_alikes=("collective-straggler", "dataloader-stall", "gpu-starved")),
    Case("tiny-files", "a file per clip, 25 ms an open, DataLoader defaults: both ranks wait on their workers",
         "slow", (), ("gpu-starved",), scenario("tiny-files", fault=False, max_steps=2000), timeout_s=25,
         look_alikes=("slow-rank", "dataloader-stall", "workers-cpu-confined")),
    Case("healthy-finished", "fast steps; the job finishes while watched",
         "healthy", (), (), scenario("healthy", fault=False, max_steps=600), timeout_s=40,
         look_alikes=("worker-died", "gpu-starved", "rank-died", "no-progress")),
    Case("checkpoint-pause", "rank 0 writes a checkpoint for 3.5 s every 10 steps; rank 1 waits in a barrier",
         "healthy", (), (), scenario("checkpoint-pause", fault=False, max_steps=400), timeout_s=12,
         look_alikes=("collective-straggler", "slow-rank", "uneven-shards", "no-progress")),
    Case("pdb-breakpoint", "rank 0 stops at a breakpoint() left in at step 5; its stdin is a pipe nobody writes",
         "hang", (0,), ("debugger-prompt", "collective-straggler"), own_waits_job("breakpoint"),
         look_alikes=("no-progress", "child-process-wait")),
    Case("flock-worker", "a rank-1 DataLoader worker asks for an flock that a child of rank 0 holds",
         "hang", (1,), ("file-lock-wait", "collective-straggler"), own_waits_job("flock"),
         look_alikes=("worker-deadlock", "dataloader-stall", "child-process-wait")),
    Case("subprocess-fifo", "rank 1 runs subprocess.run(['cat', fifo]) with no timeout; nobody opens the FIFO to write",
         "hang", (1,), ("child-process-wait", "collective-straggler"), own_waits_job("subprocess"),
         look_alikes=("debugger-prompt", "no-progress")),
    Case("prefetch-thread-died", "rank 1's prefetch thread raises 4 s in and dies; rank 1 waits in Queue.get",
         "hang", (1,), ("helper-thread-died", "collective-straggler"), own_waits_job("thread-died"),
         look_alikes=("dataloader-stall", "worker-died", "worker-error")),
    Case("rank-sigkill", "rank 1 grows by 200 MB and is SIGKILLed, as the OOM killer does; read as it dies",
         "crash", (1,), ("rank-died",), exit_job("kill9", "--fault-after", "4"),
         look_alikes=("worker-died", "missing-ranks", "workers-restarted")),
    Case("rank-abort", "rank 1 all_reduces a tensor of another size: gloo aborts rank 0 (SIGABRT)",
         "crash", (0,), ("rank-died",), exit_job("mismatch", "--fault-after", "4"),
         look_alikes=("collective-mismatch", "worker-died", "workers-restarted")),
    Case("restart-recovered", "torchrun --max-restarts=1: rank 1 raises once; the restarted ranks run to the end, exit 0",
         "healthy", (), ("workers-restarted",), restarting_job("transient", "--steps", "90", "--fault-after", "3"),
         timeout_s=60, hang_after_s=20, look_alikes=("rank-died",)),
    Case("restart-exhausted", "torchrun --max-restarts=1: rank 1 raises in every start; the restarts are used up",
         "crash", (1,), ("rank-died", "workers-restarted"), restarting_job("raise", "--steps", "90", "--fault-after", "3"),
         timeout_s=90, hang_after_s=20, look_alikes=("worker-died", "missing-ranks")),
    Case("ragged-exit", "a silent job whose rank 1 leaves 6 s after rank 0; both exit 0",
         "healthy", (), (), exit_job("ragged", "--steps", "60", "--linger", "6"), timeout_s=40,
         look_alikes=("rank-died", "missing-ranks", "no-progress")),
]
BY_NAME = {c.name: c for c in CASES}


def watch_cli(pid: int, out: Path, timeout_s: float | None, hang_after_s: float = 4.0,
              record: Path | None = None) -> Path:
    """`hangdoc watch PID ...` in a child process, as a user runs it (`record`: with --record)."""
    extra = ("--timeout", str(timeout_s)) if timeout_s else ()
    extra += ("--record", str(record)) if record is not None else ()
    extra += ("--hang-after", str(hang_after_s)) if hang_after_s != 4.0 else ()
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    done = subprocess.run([sys.executable, "-m", "hangdoc", "watch", str(pid), *WATCH, "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    if not out.exists():
        raise RuntimeError(f"watch saved no bundle (exit {done.returncode}): {done.stderr[-2000:]}")
    return out


def watch_healthy(pid: int, out: Path, timeout_s: float, hang_after_s: float = 4.0,
                  record: Path | None = None) -> Path:
    """What `watch --timeout` does, keeping the bundle it does not save for a healthy job."""
    from hangdoc.bundle.files import save_bundle
    from hangdoc.bundle.recording import Recorder
    from hangdoc.live.options import WatchOptions
    from hangdoc.live.probes import make_probes
    from hangdoc.live.watcher import Watcher

    config = WatchOptions(interval_s=0.5, hang_after_s=hang_after_s, timeout_s=timeout_s)
    recorder = Recorder.of_command(record, "watch") if record is not None else None
    try:
        outcome = Watcher(pid, make_probes(WatchOptions(gpu=False)), config, recorder=recorder).run()
    finally:
        if recorder is not None:
            recorder.close()
    return save_bundle(outcome.bundle, out)


def trim(bundle: Bundle, keep: int = KEEP_SAMPLES) -> Bundle:
    """The last `keep` samples (more if fewer change the verdict), the last lines of each log."""
    full = judge(bundle).report
    for n in range(min(keep, len(bundle.samples)), len(bundle.samples) + 1):
        cut = dataclasses.replace(bundle, samples=bundle.samples[-n:])
        report = judge(cut).report
        if (report.verdict, report.culprit_ranks) == (full.verdict, full.culprit_ranks):
            break
    seen = {s.pid for snap in cut.samples for s in snap.processes}
    job = dataclasses.replace(cut.job, processes=tuple(p for p in cut.job.processes if p.pid in seen))
    logs = tuple(LogTail(t.source, t.lines[-KEEP_LOG_LINES:]) for t in cut.logs)
    return dataclasses.replace(cut, job=job, logs=logs)


def record(case: Case, attempts: int = 3) -> Bundle:
    """Record `case`; a crash can outrun the watcher's attach, so a failed try is repeated."""
    for attempt in range(1, attempts + 1):
        try:
            return record_once(case)
        except RuntimeError as exc:
            if attempt == attempts:
                raise
            print(f"{case.name}: try {attempt} failed ({str(exc).splitlines()[0][:160]}); again", flush=True)
    raise AssertionError("unreachable")


def record_once(case: Case) -> Bundle:
    if case.derive is not None:
        source, edit = case.derive
        return edit(load_bundle(GOLDEN / source / "bundle.json"))
    workdir = Path(tempfile.mkdtemp(prefix=f"hangdoc-golden-{case.name}-"))
    cmd, markers = case.start(workdir)
    job: RunningJob = start_job(cmd, cwd=workdir, log_path=workdir / "job.log")
    try:
        if not wait_for(markers, job, timeout=90):
            tail = (workdir / "job.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{case.name}: the job did not reach its markers; log tail:\n{tail}")
        out = workdir / "bundle.json"
        if case.verdict == "healthy":
            watch_healthy(job.pid, out, case.timeout_s or 12, case.hang_after_s)
        else:
            watch_cli(job.pid, out, case.timeout_s, case.hang_after_s)
        return trim(load_bundle(out))
    finally:
        stop_job(job)
        shutil.rmtree(workdir, ignore_errors=True)


def record_replay(case: Case) -> tuple[bool, str]:
    """The case's real job watched with --record, kept in tests/replay/golden-<case>/ when its replay
    gives the case's verdict, culprits and rules (a miss is kept in a temporary directory, named)."""
    from hangdoc.live.replay import replay
    from replay_record import keep_case, keep_missed

    workdir = Path(tempfile.mkdtemp(prefix=f"hangdoc-golden-{case.name}-"))
    cmd, markers = case.start(workdir)
    job: RunningJob = start_job(cmd, cwd=workdir, log_path=workdir / "job.log")
    recording = workdir / "recording"
    try:
        if not wait_for(markers, job, timeout=90):
            return False, "the job did not reach its markers"
        out = workdir / "bundle.json"
        if case.verdict == "healthy":
            watch_healthy(job.pid, out, case.timeout_s or 12, case.hang_after_s, record=recording)
        else:
            watch_cli(job.pid, out, case.timeout_s, case.hang_after_s, record=recording)
        report = replay(recording).report
        fired = [f.rule for f in report.findings]
        got = (str(report.verdict), tuple(report.culprit_ranks))
        if got != (case.verdict, case.culprits) or not set(case.fire) <= set(fired):
            kept = keep_missed(case.name, recording)
            return False, f"replayed {got} {fired}, not the case's; its recording: hangdoc replay {kept}"
        about = {"golden": case.name, "about": case.about, "verdict": case.verdict,
                 "culprit_ranks": list(case.culprits), "rules": list(case.fire), "look_alikes": list(case.look_alikes)}
        size = keep_case(f"golden-{case.name}", recording, about)
        return True, f"{got[0]} {list(got[1])}, {size // 1024} KiB"
    finally:
        stop_job(job)
        shutil.rmtree(workdir, ignore_errors=True)


def write_case(case: Case, bundle: Bundle) -> None:
    folder = GOLDEN / case.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bundle.json").write_text(json.dumps(to_dict(bundle), separators=(",", ":")) + "\n")
    write_expected(case)
    if case.readme:
        (folder / "README").write_text(case.readme + "\n")


def write_expected(case: Case) -> None:
    """expected.json from the case: what it shows, the verdict, the culprits, the rules that must fire
    and its look-alikes, the rules it is a near miss for (a new rule's near miss joins the cases it
    concerns, written without recording them again; write_markdown then says whether the stored
    bundle agrees)."""
    expected = {"about": case.about, "verdict": case.verdict, "culprit_ranks": list(case.culprits),
                "fire": list(case.fire), "look_alikes": list(case.look_alikes)}
    (GOLDEN / case.name / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


def write_markdown(case: Case) -> str:
    bundle = load_bundle(GOLDEN / case.name / "bundle.json")
    report = judge(bundle).report
    text = report_markdown(report) + "\n"
    (GOLDEN / case.name / "expected.md").write_text(text)
    out = io.StringIO()
    render_text(report, out, width=TEXT_WIDTH, terminal=True)
    (GOLDEN / case.name / "expected.txt").write_text(out.getvalue())
    fired = sorted({f.rule for f in report.findings})
    problems = []
    if (report.verdict, report.culprit_ranks) != (case.verdict, case.culprits):
        problems.append(f"verdict {report.verdict} culprits {list(report.culprit_ranks)}")
    problems += [f"missing {r}" for r in case.fire if r not in fired]
    problems += [f"unexpected {r}" for r in fired if r not in case.fire]
    return f"{case.name}: fired {fired}" + (f"  MISMATCH: {'; '.join(problems)}" if problems else "")


DOCS = ROOT / "hangdoc" / "rules" / "pages"
_EXAMPLE = re.compile(r"<!-- example: (\S+) (\S+) -->\n(?:\n```text\n(?:(?!```)[^\n]*\n)*```\n)?")   # an empty block too


def finding_block(case: str, slug: str) -> str:
    """A golden case's finding for `slug` as plain text: title, evidence, fix."""
    bundle = load_bundle(GOLDEN / case / "bundle.json")
    found = next(f for f in judge(bundle).report.findings if f.rule == slug)
    ranks = f" (ranks {', '.join(map(str, found.ranks))})" if found.ranks else ""
    lines = [f"{found.severity.value} {found.rule}{ranks}: {found.title}"]
    lines += [f"  - {line.strip()}" for line in found.evidence]
    lines += [f"  Fix: {found.fix}"]
    return "\n".join(lines)


def write_doc_examples() -> None:
    """Fill every `<!-- example: CASE SLUG -->` in hangdoc/rules/pages/*.md with that golden finding."""
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        new = _EXAMPLE.sub(lambda m: f"<!-- example: {m[1]} {m[2]} -->\n\n```text\n"
                                     f"{finding_block(m[1], m[2])}\n```\n", text)
        if new != text:
            page.write_text(new)
            print(f"{page.relative_to(ROOT)}: examples rewritten")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--markdown-only", action="store_true", help="rewrite expected.md and expected.txt from stored bundles")
    parser.add_argument("--expected-only", action="store_true",
                        help="rewrite the stored cases' expected.json from CASES (then their reports)")
    parser.add_argument("--docs", action="store_true", help="rewrite the examples in hangdoc/rules/pages/*.md")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--replay", action="store_true",
                        help="record each real case's watch (--record) into tests/replay/golden-<case>/")
    args = parser.parse_args(argv)
    chosen = [BY_NAME[name] for name in args.cases] if args.cases else CASES
    if args.replay:
        missed = 0
        for case in chosen:
            if case.derive is not None or case.device or case.start is None:
                continue
            ok, said = record_replay(case)
            missed += not ok
            print(f"{'kept  ' if ok else 'MISSED'} golden-{case.name}: {said}", flush=True)
        return 1 if missed else 0
    if args.docs:
        write_doc_examples()
        return 0
    if args.list:
        for case in CASES:
            kind = "derived" if case.derive else "real"
            print(f"{case.name:24} {kind:8} {case.verdict:8} fire={','.join(case.fire) or '-'}")
        return 0
    for case in chosen:
        stored_only = args.markdown_only or args.expected_only
        if stored_only and not (GOLDEN / case.name / "bundle.json").exists():
            print(f"{case.name}: not recorded yet")
            continue
        if args.expected_only:
            write_expected(case)
        elif case.device and not args.markdown_only:
            print(f"{case.name}: recorded on a GPU machine (tests/gpu/device_check.py); its reports rewritten")
        elif not args.markdown_only:
            started = time.monotonic()
            write_case(case, record(case))
            print(f"{case.name}: recorded in {time.monotonic() - started:.0f} s", flush=True)
        print(write_markdown(case), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
