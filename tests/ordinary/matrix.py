"""Ordinary jobs x injected faults x (watch | run): does hangdoc say what really happened?

Each cell starts one job of tests/ordinary/jobs under torchrun (CPU, gloo) with the fault
injector (tests/ordinary/faults/sitecustomize.py) on PYTHONPATH, lets hangdoc diagnose it,
and scores the JSON report against the fault's ground truth:

    watch  the job starts in a session of its own; `hangdoc watch <torchrun pid>` attaches
           after the job's ready marker (healthy cells, and crash faults, which the injector
           holds back until the watch has taken its first sample: torchrun tears a crashed job
           down in well under a second) or after the fault fired (hang faults)
    run    `hangdoc run -- env ... torchrun ...` from the start; the injector holds the fault
           back until RUN_GATE_S after the job's first step (except faults that strike
           before training), so hangdoc has learned the job's rhythm when it strikes

Whatever happens, every process the job ever had (the launcher's session and each rank's
own session, found by walking the process tree while the job runs) is killed when the cell
ends. Used by tests/integration/test_ordinary.py and benchmarks/bench_matrix.py:

    from ordinary.matrix import FAULTS, HEALTHY, JOBS, run_cell
    result = run_cell(JOBS["plain_ddp"], FAULTS["kill9"], "run")
    result.status, result.why, result.verdict, result.culprits, result.rules
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
JOB_SCRIPTS = HERE / "jobs"
INJECTOR = HERE / "faults"
MODES = ("watch", "run")
# watch-quiet: as watch, with the job's output thrown away (a job in a terminal or under
# `> /dev/null`): nothing readable says how it ended, only the processes do.
# watch-early: as watch, attached before the fault (at the job's first step), the fault held back
# RUN_GATE_S as under run: a watch that has seen the job's rhythm, as one left running from the start.
ALL_MODES = MODES + ("watch-quiet", "watch-early")
FAULT_RANK = 1
EXIT_FOR = {"healthy": 0, "hang": 3, "crash": 4, "slow": 8}
RUN_GATE_S = 8.0


@dataclass(frozen=True)
class Job:
    """One ordinary training script and how to launch it."""

    name: str
    nproc: int = 2
    needs: tuple[str, ...] = ()       # modules it imports beyond torch; missing: the cell is skipped
    duration_s: float = 30.0          # a healthy run on its own on a 2-core machine, roughly
    launcher: str = "torchrun"        # one of LAUNCHERS: how its ranks are started
    file: str | None = None           # the script's name in jobs/ (None: the job's name)
    args: tuple[str, ...] = ()        # more arguments for the script
    step_s: float | None = None       # one steady step, roughly: a fault's delay_steps counts in it
    length: tuple[str, float] | None = None   # the argument that sets how long it trains, and the
                                              # seconds one unit of it takes, roughly

    @property
    def script(self) -> Path:
        return JOB_SCRIPTS / f"{self.file or self.name}.py"

    def lasting(self, seconds: float) -> Job:
        """The same job set to train for about `seconds` (its start-up on top)."""
        if self.length is None:
            raise ValueError(f"{self.name}: no argument sets its length")
        flag, unit_s = self.length
        units = max(1, round(seconds / unit_s))
        return dataclasses.replace(self, args=self.args + (flag, str(units)),
                                   duration_s=seconds + 15)

    def missing(self) -> list[str]:
        return [m for m in self.needs if importlib.util.find_spec(m) is None]


@dataclass(frozen=True)
class Expect:
    """The ground truth a report must match."""

    verdict: str                              # healthy | hang | crash | slow
    culprits: tuple[int, ...] = ()
    rules: frozenset[str] | None = None       # one of these must be among the findings; None: any
    cause: tuple[str, ...] = ()               # one of these must appear in the report's cause or findings


@dataclass(frozen=True)
class Fault:
    """A fault the injector plants (kind None: none) and what hangdoc must say about it."""

    name: str
    expect: Expect
    kind: str | None = None
    settings: tuple[tuple[str, str], ...] = ()     # more HANGDOC_FAULT_* variables
    attach: str = "after"                          # watch: after the fault fired, or "before" (gated)
    early: bool = False                            # strikes before training: never held back
    # Where the outcome depends on the job: the job's output holds `crashed_if` when the fault
    # crashed it (`expect` then), else `expect_hung` is the truth.
    crashed_if: str | None = None
    expect_hung: Expect | None = None
    gate_samples: int = 1          # attach "before": the fault waits for the watch's sample N
    watch_s: float | None = None                   # --timeout for watch; None: from the job's length
    modes: tuple[str, ...] = ALL_MODES             # where its truth holds (a job slowed to its end
                                                   # outlasts run's time: watched only)
    restarted: Expect | None = None                # the truth under a launcher that restarts the ranks
                                                   # (torchrun --max-restarts: the elastic jobs)
    delay_steps: float | None = None   # rank_slow's HANGDOC_FAULT_DELAY in the job's own steps (Job.step_s)
    slows: float = 1.0                 # the job takes up to this many times its length (run's --timeout)

    @property
    def healthy(self) -> bool:
        return self.kind is None

    def rank_of(self) -> int:
        """The rank it strikes."""
        return int(dict(self.settings).get("HANGDOC_FAULT_RANK", FAULT_RANK))

    def on_rank(self, rank: int) -> Fault:
        """The same fault planted on another rank: the culprit moves with it."""
        if self.healthy or rank == FAULT_RANK:
            return self
        hung = self.expect_hung and dataclasses.replace(self.expect_hung, culprits=(rank,))
        return dataclasses.replace(self, expect=dataclasses.replace(self.expect, culprits=(rank,)), expect_hung=hung,
                                   settings=self.settings + (("HANGDOC_FAULT_RANK", str(rank)),))

    def truth(self, job_output: str, launcher: str = "torchrun") -> Expect:
        """The expectation, given what the job printed and how it was launched."""
        if self.restarted is not None and launcher == "elastic":
            return self.restarted
        if self.expect_hung is not None and self.crashed_if not in job_output:
            return self.expect_hung
        return self.expect


def _hang(*rules: str) -> Expect:
    return Expect("hang", (FAULT_RANK,), frozenset(rules))


def _crash(*rules: str, cause: tuple[str, ...] = ()) -> Expect:
    return Expect("crash", (FAULT_RANK,), frozenset(rules), cause)


# The rule that names the cause where hangdoc has one; collective-straggler (who, not why) where not.
HANG_S = 150.0      # hangdoc waits 60 s for a first step before it calls a hang when it saw none
HEALTHY = Fault("healthy", Expect("healthy"))
_ALL_FAULTS = [
    HEALTHY,
    Fault("stop", _hang("collective-straggler"), "stop", watch_s=HANG_S),
    Fault("kill9", _crash("rank-died", cause=("SIGKILL", "signal 9")), "kill9", attach="before"),
    Fault("segv", _crash("rank-died", cause=("SIGSEGV", "signal 11", "segmentation fault")), "segv", attach="before"),
    Fault("abrt", _crash("rank-died", cause=("SIGABRT", "signal 6", "abort")), "abrt", attach="before"),
    Fault("oom_kill", _crash("rank-died", cause=("SIGKILL", "signal 9", "out of memory", "oom")), "oom_kill",
          attach="before"),
    Fault("breakpoint", _hang("debugger-prompt"), "breakpoint", watch_s=HANG_S),
    Fault("skip_collective", _hang("collective-mismatch"), "skip_collective", watch_s=HANG_S),
    # gloo aborts the rank that receives a message of the wrong size (rank 1, which asked for it);
    # where the other rank's next collective is of another kind (HF Trainer's all_gather), both wait.
    Fault("extra_collective", _crash("rank-died", "collective-mismatch", cause=("mismatch", "doesn't match")),
          "extra_collective", attach="before", watch_s=HANG_S, crashed_if="EnforceNotMet",
          expect_hung=_hang("collective-mismatch")),
    Fault("subprocess_hang", _hang("child-process-wait"), "subprocess_hang", watch_s=HANG_S),
    Fault("poll_lock", _hang("collective-straggler", "file-lock-wait"), "poll_lock",
          settings=(("HANGDOC_FAULT_STEP", "0"),), watch_s=HANG_S, early=True),
    Fault("kill_helper_thread", _hang("helper-thread-died"), "kill_helper_thread", watch_s=HANG_S),
    Fault("hang_before_init", _hang("missing-ranks", "collective-straggler"), "hang_before_init", watch_s=HANG_S,
          early=True),
    Fault("worker_futex", _hang("worker-deadlock", "dataloader-stall"), "worker_futex", watch_s=HANG_S),
    Fault("worker_flock", _hang("file-lock-wait"), "worker_flock", watch_s=HANG_S),
    Fault("worker_socket", _hang("dataloader-stall"), "worker_socket", watch_s=HANG_S),
    Fault("worker_kill9", _crash("worker-died"), "worker_kill9", attach="before"),
    Fault("worker_segv", _crash("worker-died"), "worker_segv", attach="before"),
    # Watched from before: the watch learns the job's rhythm, then one batch takes 16 s, sample by sample.
    Fault("worker_slow", Expect("healthy"), "worker_slow", attach="before", gate_samples=3),
    # Attached once the job crawls: rank 1 computes 0.3 s more every step from step 20 on, for good.
    # The watch's --timeout ends it, slow (exit 8); under run the job would outlast the cell.
    Fault("rank_slow", Expect("slow", (FAULT_RANK,), frozenset({"slow-rank"})), "rank_slow", watch_s=40,
          modes=("watch", "watch-quiet")),
    # Rank 1 computes two of the job's own steps more every step from step 20 on (3x slower): the job
    # still ends by itself, so run reads it too.
    Fault("rank_3x", Expect("slow", (FAULT_RANK,), frozenset({"slow-rank"})), "rank_slow", watch_s=60,
          delay_steps=2.0, slows=4.0),
    # A transient error, in the first start only: torchrun --max-restarts starts the ranks again and the
    # job ends 0 (healthy, the restart named); under a launcher that does not restart, the crash.
    Fault("raise_once", _crash("rank-died", cause=("RuntimeError",)), "raise", attach="before",
          settings=(("HANGDOC_FAULT_START", "0"),),
          restarted=Expect("healthy", (), frozenset({"workers-restarted"}))),
    # The same error in every start: the restarts are used up, the crash named by the first failure.
    Fault("raise_always", _crash("rank-died", "workers-restarted", cause=("RuntimeError",)), "raise",
          attach="before"),
]
# Critical findings that may accompany any fault's own: who the others wait for.
COMPANIONS = frozenset({"collective-straggler", "collective-mismatch", "dataloader-stall"})
FAULTS: dict[str, Fault] = {f.name: f for f in _ALL_FAULTS}

JOBS: dict[str, Job] = {j.name: j for j in [
    Job("plain_ddp", duration_s=20, step_s=0.013, length=("--epochs", 1.7)),
    # Loop styles (tests/ordinary/README.md): the loop at module level, and `while True: next(it)`
    # with the step on an object; --nccl-shape: NCCL's wait on CPU (the sync line spins). Its steps
    # take 0.015-0.05 s as the machine is loaded: 1500 of them outlast run's fault gate (8 s after
    # the first step) on an idle machine too.
    Job("module_loop", duration_s=30, step_s=0.02, length=("--steps", 0.015)),
    Job("next_loop", duration_s=30, step_s=0.02, length=("--steps", 0.015)),
    Job("plain_ddp_nccl", file="plain_ddp", args=("--nccl-shape",), duration_s=30, step_s=0.05,
        length=("--epochs", 6.4)),
    Job("module_loop_nccl", file="module_loop", args=("--nccl-shape", "--steps", "1500"), duration_s=75,
        step_s=0.05, length=("--steps", 0.05)),
    Job("next_loop_nccl", file="next_loop", args=("--nccl-shape", "--steps", "1500"), duration_s=75,
        step_s=0.05, length=("--steps", 0.05)),
    # The same kind of job under every common launcher (see LAUNCHERS).
    Job("elastic_ddp", file="plain_ddp", launcher="elastic", duration_s=22),
    Job("spawn_tcp", file="spawn_ddp", launcher="spawn", args=("--start", "spawn", "--init", "tcp"), duration_s=20),
    Job("spawn_file", file="spawn_ddp", launcher="spawn", args=("--start", "spawn", "--init", "file"),
        duration_s=20),
    Job("process_env", file="spawn_ddp", launcher="spawn", args=("--start", "process", "--init", "env"),
        duration_s=20),
    Job("per_rank_ddp", file="plain_ddp", launcher="per-rank", duration_s=24),
    Job("accelerate_launch", file="accelerate_loop", launcher="accelerate", needs=("accelerate",), duration_s=26),
    Job("lightning_own", file="lightning_ddp", launcher="lightning", needs=("pytorch_lightning",), duration_s=22),
    Job("iterable_ddp", nproc=3, duration_s=24),
    Job("lightning_ddp", needs=("pytorch_lightning",), duration_s=20, step_s=0.013, length=("--epochs", 2.0)),
    Job("accelerate_loop", needs=("accelerate",), duration_s=24, step_s=0.014, length=("--epochs", 2.0)),
    Job("hf_trainer", needs=("transformers",), duration_s=22, step_s=0.03, length=("--epochs", 5.0)),
    Job("webdataset_stream", needs=("webdataset",), duration_s=21),
]}


@dataclass
class CellResult:
    """One cell: what hangdoc said, how long it took, and whether it was right."""

    job: str
    fault: str
    mode: str
    rep: int = 0
    fault_rank: int | None = None
    expected: dict = field(default_factory=dict)    # the Expect it was judged against
    status: str = "INVALID"           # OK | MISS | INVALID (the cell itself went wrong: see why)
    why: list[str] = field(default_factory=list)
    exit_code: int | None = None
    verdict: str | None = None
    culprits: list[int] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    critical: list[str] = field(default_factory=list)
    also_said: list[str] = field(default_factory=list)     # critical findings beyond the expected ones
    headline: str | None = None
    fault_to_exit_s: float | None = None
    attach_to_exit_s: float | None = None
    wall_s: float = 0.0
    job_rc: int | None = None
    fault_record: dict | None = None
    threshold: dict | None = None     # how hang was told from slow: the report's threshold
    findings: list[dict] = field(default_factory=list)
    cause: list[str] = field(default_factory=list)
    ranks: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)       # `hangdoc report` of the saved bundle
    hangdoc_stderr: list[str] = field(default_factory=list)
    job_log: list[str] = field(default_factory=list)
    bundle: str | None = None
    leftovers: list[str] = field(default_factory=list)    # processes the kill missed (should be none)

    @property
    def ok(self) -> bool:
        return self.status == "OK"

    def describe(self) -> str:
        """What hangdoc said, in a few lines: for assertion messages and the bench's misses."""
        lines = [f"{self.job} / {self.fault} / {self.mode}: {self.status} {'; '.join(self.why)}",
                 f"  exit {self.exit_code}, verdict {self.verdict}, culprits {self.culprits}, rules {self.rules}"
                 + (f", also said (critical): {', '.join(self.also_said)}" if self.also_said else ""),
                 f"  headline: {self.headline}"]
        for f in self.findings:
            lines.append(f"  {f['severity'].upper()} {f['rule']} {f['ranks']}: {f['title']}")
            if self.status == "MISS":     # what told it, so a miss in a CI log explains itself
                lines += [f"      {e}" for e in f.get("evidence", ())[:8]]
        lines += [f"  cause: {c}" for c in self.cause[:3]]
        lines += [f"  rank {r}" for r in self.ranks]
        if self.status == "INVALID":
            lines += ["  hangdoc stderr: " + x for x in self.hangdoc_stderr[-5:]]
            lines += ["  job log: " + x for x in self.job_log[-15:]]
        return "\n".join(lines)


# ---- processes ---------------------------------------------------------------------------

class ProcessTree:
    """Every process under `root`, remembered while it lives (a rank's worker is reparented
    away when its rank dies), with the sessions they ran in; `kill` ends them all."""

    def __init__(self, root: int, every: float = 0.2):
        self.root = root
        self.procs: dict[int, psutil.Process] = {}
        self.sessions: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.refresh()
        self._thread = threading.Thread(target=self._watch, args=(every,), daemon=True)
        self._thread.start()

    def refresh(self) -> None:
        try:
            root = psutil.Process(self.root)
            found = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        with self._lock:
            for proc in found:
                if proc.pid not in self.procs or not self.procs[proc.pid].is_running():
                    self.procs[proc.pid] = proc
                try:
                    self.sessions.add(os.getsid(proc.pid))
                except OSError:
                    pass

    def _watch(self, every: float) -> None:
        while not self._stop.wait(every):
            self.refresh()

    def kill(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.refresh()
        own = os.getsid(0)
        sessions = self.sessions - {own}
        for _ in range(5):       # a rank may fork a worker while we kill: look again
            victims = [p for p in self.procs.values() if _alive(p)]
            for proc in psutil.process_iter():
                try:
                    if proc.pid not in self.procs and os.getsid(proc.pid) in sessions and _alive(proc):
                        victims.append(proc)
                except (OSError, psutil.Error):
                    continue
            for sid in sessions:
                try:
                    os.killpg(sid, signal.SIGKILL)
                except OSError:
                    pass
            if not victims:
                return
            for proc in victims:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(victims, timeout=3)
            with self._lock:
                self.procs = {pid: p for pid, p in self.procs.items() if _alive(p)}


def _sweep(work: Path) -> list[str]:
    """Kill and name any process still running with the cell's folder on its command line."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if str(work) in " ".join(proc.info["cmdline"] or ()) and _alive(proc):
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'])[:120]}")
                proc.kill()
        except psutil.Error:
            continue
    return found


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class _Lines:
    """A pipe read to the end on a thread of its own, line by line."""

    def __init__(self, pipe):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(iter(pipe.readline, "")), daemon=True)
        self._thread.start()

    def text(self) -> str:
        self._thread.join(timeout=10)
        return "".join(self.lines)


# ---- one cell ----------------------------------------------------------------------------

def torchrun(job: Job, out: Path) -> list[str]:
    launcher = Path(sys.executable).with_name("torchrun")
    head = [str(launcher)] if launcher.exists() else [sys.executable, "-m", "torch.distributed.run"]
    return [*head, f"--nproc_per_node={job.nproc}", "--standalone", str(job.script), "--output-dir", str(out)]


# How each launcher starts the job's ranks (the watch attaches to the process this starts):
#   torchrun     torchrun --standalone
#   elastic      torchrun's elastic agent: --nnodes=1:2, the c10d rendezvous, --max-restarts=2
#   spawn        the script itself, whose torch.multiprocessing.spawn / multiprocessing.Process starts the ranks
#   per-rank     one process per rank with RANK / WORLD_SIZE in its environment, as srun and mpirun start them
#   accelerate   accelerate launch (CPU, one machine, N processes)
#   lightning    the script itself: Lightning's own launcher starts ranks > 0 again with LOCAL_RANK
LAUNCHERS = ("torchrun", "elastic", "spawn", "per-rank", "accelerate", "lightning")


def launch(job: Job, out: Path) -> list[str]:
    """The command that starts `job` its launcher's way."""
    script = [str(job.script), "--output-dir", str(out), *job.args]
    if job.launcher == "torchrun":
        return torchrun(job, out) + list(job.args)
    if job.launcher == "elastic":
        head = torchrun(job, out)[:1] if Path(sys.executable).with_name("torchrun").exists() else \
            [sys.executable, "-m", "torch.distributed.run"]
        # last_call_timeout: how long the rendezvous waits for a second node (30 s by default, every
        # start). Two restarts: on a loaded machine gloo's connect can time out in a new start.
        return [*head, f"--nproc_per_node={job.nproc}", "--nnodes=1:2", "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{_free_port()}", "--rdzv-conf=last_call_timeout=2",
                "--max-restarts=2", *script]
    if job.launcher in ("spawn", "lightning"):
        return [sys.executable, *script]
    if job.launcher == "per-rank":
        return [sys.executable, str(JOB_SCRIPTS / "per_rank_launcher.py"), "--nproc", str(job.nproc), *script]
    if job.launcher == "accelerate":
        # --multi_gpu is accelerate's torchrun-style launcher (on CPU, --cpu alone starts one process);
        # the script's Accelerator(cpu=True) makes it gloo on CPU.
        return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1",
                "--num_processes", str(job.nproc), "--main_process_port", str(_free_port()), "--mixed_precision",
                "no", "--dynamo_backend", "no", *script]
    raise ValueError(f"launcher {job.launcher!r}: one of {LAUNCHERS}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hangdoc() -> list[str]:
    return [sys.executable, "-m", "hangdoc"]


class _Paths:
    def __init__(self, work: Path):
        self.work = work
        self.out = work / "out"            # the job's own working dir
        self.ready = work / "ready"
        self.record = work / "fault.json"
        self.gate = work / "gate"
        self.faults = work / "faults"      # the injector's FIFOs and lock files
        self.bundle = work / "bundle.json"
        self.log = work / "job.log"
        self.out.mkdir(parents=True)
        self.faults.mkdir()


def job_env(fault: Fault, paths: _Paths, sample: int, gated: bool = False, job: Job | None = None) -> dict[str, str]:
    """The variables the job runs with, on top of the harness's own environment."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(INJECTOR), os.environ.get("PYTHONPATH")])),
           "HANGDOC_TEST_READY": str(paths.ready), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": str(paths.work / "hf-home"), "MPLCONFIGDIR": str(paths.work / "mpl")}
    if fault.kind:
        env.update({"HANGDOC_FAULT": fault.kind, "HANGDOC_FAULT_RANK": str(FAULT_RANK),
                    "HANGDOC_FAULT_STEP": "20", "HANGDOC_FAULT_SAMPLE": str(sample),
                    "HANGDOC_FAULT_RECORD": str(paths.record), "HANGDOC_FAULT_DIR": str(paths.faults)})
        if gated:
            env["HANGDOC_FAULT_GATE"] = str(paths.gate)
        if fault.delay_steps and job is not None and job.step_s:
            env["HANGDOC_FAULT_DELAY"] = f"{fault.delay_steps * job.step_s:g}"
        env.update(dict(fault.settings))
    return env


def _clean_environ() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGDOC_FAULT") and k != "PYTHONBREAKPOINT"}
    env.update(NO_COLOR="1", COLUMNS="200")
    env.pop("GITHUB_STEP_SUMMARY", None)
    return env


_SAMPLE = re.compile(r" sample (\d+) ")


def _samples_taken(status_lines: list[str]) -> int:
    """The latest sample number in watch's --no-live status lines (printed at samples 1, 3, 6, ...)."""
    numbers = [int(m.group(1)) for line in status_lines for m in [_SAMPLE.search(line)] if m]
    return max(numbers, default=0)


def _wait_for(path: Path, proc: subprocess.Popen, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if path.exists():
            return True
        if proc.poll() is not None:
            return path.exists()
        time.sleep(0.05)
    return False


def _tail(path: Path, lines: int = 40) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [line[:300] for line in text.replace("\r", "\n").splitlines() if line.strip()][-lines:]


def watch_timeout(job: Job, fault: Fault) -> float:
    return fault.watch_s or round(job.duration_s * 4 + 40)


def run_cell(job: Job, fault: Fault, mode: str, *, rep: int = 0, rank: int = FAULT_RANK,
             interval: float | None = None, sample: int = 200, keep_bundle: Path | None = None,
             attach: str = "launcher") -> CellResult:
    """Run one cell start to end (the fault on `rank`); the job and hangdoc are always ended."""
    if mode not in ALL_MODES:
        raise ValueError(f"mode {mode!r}: one of {ALL_MODES}")
    fault = fault.on_rank(rank)
    result = CellResult(job.name, fault.name, mode, rep, None if fault.healthy else rank, _expected(fault.expect))
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"hangdoc-matrix-{job.name}-{fault.name}-{mode}-"))
    try:
        paths = _Paths(work)
        extra = ["--interval", str(interval)] if interval else []
        if mode == "run":
            _run(job, fault, paths, result, extra, sample)
        else:
            _watch(job, fault, paths, result, extra, sample, quiet=mode == "watch-quiet", attach=attach,
                   early=mode == "watch-early")
        expect = fault.truth(paths.log.read_text(errors="replace") if paths.log.exists() else "", job.launcher)
        result.expected = _expected(expect)
        _score(result, expect, paths)
        if keep_bundle is not None and paths.bundle.exists():
            keep_bundle.mkdir(parents=True, exist_ok=True)
            kept = keep_bundle / f"{job.name}-{fault.name}-r{rank}-{mode}-{rep}.json"
            shutil.copyfile(paths.bundle, kept)
            result.bundle = str(kept)
        result.job_log = _tail(paths.log)
    finally:
        result.wall_s = round(time.monotonic() - started, 1)
        if os.environ.get("HANGDOC_MATRIX_KEEP"):
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return result


def _expected(expect: Expect) -> dict:
    return {"verdict": expect.verdict, "culprits": list(expect.culprits), "rules": sorted(expect.rules or ()),
            "cause": list(expect.cause)}


def _watch(job: Job, fault: Fault, paths: _Paths, result: CellResult, extra: list[str], sample: int,
           quiet: bool = False, attach: str = "launcher", early: bool = False) -> None:
    timeout = watch_timeout(job, fault)
    early = early and bool(fault.kind) and not fault.early and fault.attach != "before"
    gated = bool(fault.kind) and (fault.attach == "before" or early)
    env = dict(_clean_environ(), **job_env(fault, paths, sample, gated, job))
    with open(os.devnull if quiet else paths.log, "wb") as log:
        launcher = subprocess.Popen(launch(job, paths.out), cwd=paths.out, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    tree = ProcessTree(launcher.pid)
    watch = None
    try:
        before = fault.healthy or fault.attach == "before" or early
        marker = paths.ready if before else paths.record
        if not _wait_for(marker, launcher, time.monotonic() + job.duration_s * 3 + 60):
            result.why.append(f"the job never wrote {marker.name} (job exit {launcher.poll()})")
            return
        pid = attach_pid(launcher.pid, attach, fault.rank_of() if attach != "launcher" else None)
        if pid is None:
            result.why.append(f"no {attach} process to attach to under the launcher")
            return
        watch = subprocess.Popen([*hangdoc(), "watch", str(pid), "--format", "json", "--no-live",
                                  "--no-gpu", "--out", str(paths.bundle), "--timeout", str(timeout), *extra],
                                 env=_clean_environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
        attached = time.time()
        stdout, stderr = _Lines(watch.stdout), _Lines(watch.stderr)
        if early:
            threading.Thread(target=_open_gate_after, args=(paths, watch, RUN_GATE_S), daemon=True).start()
        elif gated:
            deadline = time.monotonic() + 60
            while (time.monotonic() < deadline and watch.poll() is None
                   and _samples_taken(stderr.lines) < fault.gate_samples):
                time.sleep(0.05)
            paths.gate.touch()
        try:
            result.exit_code = watch.wait(timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            result.why.append(f"hangdoc watch did not exit within --timeout {timeout:g} s + 60 s")
        finished = time.time()
        result.attach_to_exit_s = round(finished - attached, 1)
        _read_report(result, stdout.text(), stderr.text())
        try:
            result.job_rc = launcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            result.job_rc = None
        _fault_latency(result, paths, finished)
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
            watch.wait()
        tree.kill()
        launcher.wait()
        result.leftovers = _sweep(paths.work)


def _run(job: Job, fault: Fault, paths: _Paths, result: CellResult, extra: list[str], sample: int) -> None:
    timeout = watch_timeout(job, fault) + job.duration_s * fault.slows
    gated = bool(fault.kind) and not fault.early
    variables = [f"{k}={v}" for k, v in job_env(fault, paths, sample, gated, job).items()]
    cmd = [*hangdoc(), "run", "--format", "json", "--no-gpu", "--out", str(paths.bundle), "--timeout", str(timeout),
           *extra, "--", "env", *variables, *launch(job, paths.out)]
    with open(paths.log, "w") as log:
        run = subprocess.Popen(cmd, cwd=paths.out, env=_clean_environ(), stdout=subprocess.PIPE, stderr=log,
                               stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    started = time.time()
    tree = ProcessTree(run.pid)
    try:
        stdout = _Lines(run.stdout)
        if gated:
            threading.Thread(target=_open_gate_later, args=(paths, run), daemon=True).start()
        try:
            result.exit_code = run.wait(timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            result.why.append(f"hangdoc run did not exit within --timeout {timeout:g} s + 60 s")
        finished = time.time()
        result.attach_to_exit_s = round(finished - started, 1)
        log_lines = _tail(paths.log, 5)
        _read_report(result, stdout.text(), "\n".join(log_lines))
        if fault.expect.verdict == "healthy" and "ChildFailedError" in paths.log.read_text(errors="replace"):
            result.why.append("the job itself failed (torchrun: ChildFailedError)")
        _fault_latency(result, paths, finished)
    finally:
        tree.kill()
        run.wait()
        result.leftovers = _sweep(paths.work)


def attach_pid(launcher: int, attach: str, rank_hint: int | None = None) -> int | None:
    """The pid a watch attaches to: the launcher's, one rank's (a Python child of the launcher that
    is not multiprocessing's resource tracker, the fault's rank's pid order when it can), or a
    DataLoader worker's of that rank."""
    if attach == "launcher":
        return launcher
    try:
        ranks = [c for c in psutil.Process(launcher).children()
                 if "python" in c.name() and "resource_tracker" not in " ".join(c.cmdline())]
    except psutil.Error:
        return None
    ranks.sort(key=lambda c: c.pid)
    if not ranks:
        return None
    rank = ranks[min(rank_hint or 0, len(ranks) - 1)]
    if attach == "rank":
        return rank.pid
    try:
        workers = sorted(rank.children(), key=lambda c: c.pid)
    except psutil.Error:
        return None
    return workers[0].pid if workers else None


def _open_gate_later(paths: _Paths, run: subprocess.Popen) -> None:
    """Under run, a fault waits RUN_GATE_S after the first step, so hangdoc has seen the job's
    rhythm (a fault at step 20 would come before its second sample)."""
    if _wait_for(paths.ready, run, time.monotonic() + 300) and run.poll() is None:
        time.sleep(RUN_GATE_S)
        paths.gate.touch()


def _open_gate_after(paths: _Paths, watch: subprocess.Popen, seconds: float) -> None:
    """watch-early: the fault waits `seconds` after the watch started, as under run after the first step."""
    time.sleep(seconds)
    if watch.poll() is None:
        paths.gate.touch()


def _fault_latency(result: CellResult, paths: _Paths, finished: float) -> None:
    try:
        result.fault_record = json.loads(paths.record.read_text())
    except (OSError, ValueError):
        return
    result.fault_to_exit_s = round(finished - result.fault_record["time"], 1)


def _read_report(result: CellResult, stdout: str, stderr: str) -> None:
    result.hangdoc_stderr = [line for line in stderr.splitlines() if line.strip()][-20:]
    try:
        report = json.loads(stdout)
    except ValueError:
        if stdout.strip():
            result.hangdoc_stderr.append("stdout (not JSON): " + stdout.strip()[:500])
        return
    result.verdict = report.get("verdict")
    result.culprits = list(report.get("culprit_ranks") or [])
    findings = report.get("findings") or []
    result.rules = list(dict.fromkeys(f["rule"] for f in findings))
    result.critical = [f["rule"] for f in findings if f.get("severity") == "critical"]
    result.findings = [{"rule": f["rule"], "severity": f.get("severity"), "ranks": f.get("ranks"),
                        "title": f.get("title"), "evidence": (f.get("evidence") or [])[:4]} for f in findings]
    result.cause = [str(c) for c in report.get("cause") or []]
    result.threshold = report.get("threshold")
    for rank in report.get("ranks") or []:
        workers = ", ".join(f"w{w.get('index')} {w.get('state')}{'' if w.get('alive', True) else ' (dead)'}"
                            for w in rank.get("workers") or [])
        result.ranks.append(f"{rank.get('rank')}: {rank.get('state')} {rank.get('progress')} "
                            f"{rank.get('top_frame')}" + (f" [{workers}]" if workers else ""))


def _score(result: CellResult, expect: Expect, paths: _Paths) -> None:
    if result.fault != "healthy" and result.fault_record is None and not result.why:
        result.why.append("the fault never fired")
    if expect.verdict == "healthy" and result.mode != "run" and result.job_rc != 0 and not result.why:
        result.why.append("the job was still running when the watch stopped" if result.job_rc is None
                          else f"the job itself failed (exit {result.job_rc})")
    if result.leftovers:
        result.why.append(f"{len(result.leftovers)} process(es) outlived the cell's kill: {result.leftovers[0]}")
    if result.why:
        result.status = "INVALID"
    else:
        result.why = judge(expect, result)
        result.status = "MISS" if result.why else "OK"
        if expect.verdict != "healthy":
            result.also_said = [r for r in result.critical if r not in (expect.rules or set()) | COMPANIONS]
    if paths.bundle.exists():
        result.text = _text_report(paths.bundle)
        result.headline = next((line for line in result.text if line.strip()), None)


def judge(expect: Expect, result: CellResult) -> list[str]:
    """Why the report does not match the ground truth; empty when it does."""
    if result.verdict is None:
        return [f"no JSON report (exit {result.exit_code}): " + " | ".join(result.hangdoc_stderr[-2:])]
    why = []
    if result.verdict != expect.verdict:
        why.append(f"verdict {result.verdict}, expected {expect.verdict}")
    # `run` keeps its command's exit code on a slow job that ends well (8 only with --fail-on slow).
    exit_code = 0 if expect.verdict == "slow" and result.mode == "run" else EXIT_FOR[expect.verdict]
    if result.exit_code != exit_code:
        why.append(f"exit {result.exit_code}, expected {exit_code}")
    if tuple(result.culprits) != expect.culprits:
        why.append(f"culprits {result.culprits}, expected {list(expect.culprits)}")
    if expect.verdict == "healthy" and result.critical:
        why.append(f"critical finding(s) on a healthy job: {', '.join(result.critical)}")
    if expect.rules and not expect.rules & set(result.rules):
        why.append(f"rules {result.rules or '[]'}, expected one of {sorted(expect.rules)}")
    if expect.cause:
        said = " ".join(result.cause + [f"{f['title']} {' '.join(f['evidence'])}" for f in result.findings]).lower()
        if not any(word.lower() in said for word in expect.cause):
            why.append(f"the report does not say why (none of {list(expect.cause)} in its cause or findings)")
    return why


def _text_report(bundle: Path) -> list[str]:
    try:
        done = subprocess.run([*hangdoc(), "report", str(bundle), "--format", "text"], capture_output=True,
                              text=True, timeout=60, env=_clean_environ())
    except subprocess.TimeoutExpired:
        return ["(hangdoc report timed out)"]
    return [line.rstrip() for line in done.stdout.splitlines()][:80]


def applicable(job: Job, fault: Fault) -> bool:
    """Every job steps an optimizer and has DataLoader workers, so every fault applies to every job."""
    return True


def summarise(results: list[CellResult]) -> dict:
    """The two figures the matrix exists for, with the cells behind them."""
    valid = [r for r in results if r.status != "INVALID"]
    healthy = [r for r in valid if r.fault == "healthy"]
    healthy_wrong = [r for r in healthy if r.verdict != "healthy" or r.critical or r.exit_code != 0]
    faults = [r for r in valid if r.fault != "healthy"]
    right = [r for r in faults if r.ok]
    located = [r for r in faults if r.verdict == r.expected["verdict"] and r.culprits == r.expected["culprits"]
               and (not r.expected["rules"] or set(r.expected["rules"]) & set(r.rules))]
    pct = (lambda n: round(100 * n / len(faults), 1) if faults else None)
    return {"cells": len(results), "invalid": len(results) - len(valid),
            "healthy_cells": len(healthy), "healthy_wrong": len(healthy_wrong), "healthy_goal": 0,
            "fault_cells": len(faults), "fault_right": len(right), "fault_right_pct": pct(len(right)),
            "fault_culprit_and_rule": len(located), "fault_culprit_and_rule_pct": pct(len(located)),
            "fault_goal_pct": 95.0}


def as_dict(result: CellResult) -> dict:
    return dataclasses.asdict(result)


# The launcher matrix: a healthy and a fault cell for each launcher, (job, fault, mode, attach to).
# `python tests/ordinary/matrix.py --launchers` runs it and prints the table; tests/integration/
# test_launchers.py runs it with HANGDOC_LAUNCHER_MATRIX=1 (make test runs a few cells of it).
LAUNCHER_CELLS = (
    ("plain_ddp", "healthy", "watch", "launcher"), ("plain_ddp", "kill9", "run", "launcher"),
    ("elastic_ddp", "healthy", "watch", "launcher"), ("elastic_ddp", "raise_once", "watch", "launcher"),
    ("elastic_ddp", "raise_once", "run", "launcher"), ("elastic_ddp", "raise_always", "run", "launcher"),
    ("spawn_tcp", "healthy", "run", "launcher"), ("spawn_tcp", "worker_futex", "watch", "launcher"),
    ("spawn_tcp", "worker_futex", "watch", "rank"), ("spawn_tcp", "worker_futex", "watch", "worker"),
    ("spawn_file", "healthy", "watch", "launcher"), ("spawn_file", "stop", "watch", "rank"),
    ("process_env", "healthy", "run", "launcher"), ("process_env", "kill9", "run", "launcher"),
    ("per_rank_ddp", "healthy", "watch", "launcher"), ("per_rank_ddp", "worker_futex", "watch", "rank"),
    ("accelerate_launch", "healthy", "watch", "launcher"), ("accelerate_launch", "kill9", "run", "launcher"),
    ("lightning_own", "healthy", "watch", "launcher"), ("lightning_own", "worker_futex", "watch", "worker"),
)


# The loop-style matrix: how a script writes its loop x what goes wrong, no flag, watched from the
# launcher's pid (`python -m benchmarks.bench_loops`). A column is a fault on the style's job, or on
# the same loop in NCCL's wait shape (--nccl-shape: the sync line spins while the others wait).
@dataclass(frozen=True)
class LoopStyle:
    """One way of writing the training loop: its job, and its NCCL-shape variant where one can be written."""

    name: str
    job: str
    nccl_job: str | None = None


NCCL_NA = "the NCCL wait shape cannot be written on CPU without rewriting the framework's loop"
LOOP_STYLES: dict[str, LoopStyle] = {s.name: s for s in [
    LoopStyle("main", "plain_ddp", "plain_ddp_nccl"),           # the loop inside main()
    LoopStyle("module", "module_loop", "module_loop_nccl"),     # the loop at module level
    LoopStyle("next", "next_loop", "next_loop_nccl"),           # while True: batch = next(it)
    LoopStyle("lightning", "lightning_ddp"),
    LoopStyle("accelerate", "accelerate_loop"),
    LoopStyle("hf_trainer", "hf_trainer"),
]}
# column -> (the fault, whether it strikes the NCCL-shape variant)
LOOP_FAULTS: dict[str, tuple[str, bool]] = {
    "healthy": ("healthy", False),
    "worker_block": ("worker_socket", False),     # a DataLoader worker blocked on data: hang, rank 1
    "rank_3x": ("rank_3x", False),                # rank 1 three times slower: slow, rank 1
    "nccl_data_stall": ("worker_socket", True),   # the same worker, the others spinning at their sync
    "nccl_straggler": ("rank_3x", True),          # the same straggler, the others spinning at their sync
}


def loop_cell(style: str, column: str) -> tuple[Job, Fault] | str:
    """The job and the fault of one cell of the loop matrix, or why the cell has none."""
    fault, nccl = LOOP_FAULTS[column]
    loop = LOOP_STYLES[style]
    job = loop.nccl_job if nccl else loop.job
    if job is None:
        return NCCL_NA
    return JOBS[job], FAULTS[fault]


def launcher_table(results: list[tuple[tuple, CellResult]]) -> str:
    """The launcher matrix as a Markdown table: launcher x fault -> verdict, culprit, rule, seconds."""
    lines = ["| launcher | job | fault | mode | attach | status | verdict | culprits | rules | s to verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (job, fault, mode, attach), r in results:
        seconds = r.fault_to_exit_s if r.fault_to_exit_s is not None else r.attach_to_exit_s
        lines.append(f"| {JOBS[job].launcher} | {job} | {fault} | {mode} | {attach} | {r.status} | {r.verdict} | "
                     f"{r.culprits} | {', '.join(r.rules) or '-'} | {seconds} |")
    return "\n".join(lines)


if __name__ == "__main__":      # one cell by hand: python tests/ordinary/matrix.py JOB FAULT MODE [RANK]
    if sys.argv[1:2] == ["--launchers"]:
        wanted = sys.argv[2:]
        done = []
        for key in LAUNCHER_CELLS:
            if wanted and key[0] not in wanted:
                continue
            cell = run_cell(JOBS[key[0]], FAULTS[key[1]], key[2], attach=key[3])
            print(cell.describe(), flush=True)
            done.append((key, cell))
        print(launcher_table(done))
        sys.exit(0)
    cell = run_cell(JOBS[sys.argv[1]], FAULTS[sys.argv[2]], sys.argv[3],
                    rank=int(sys.argv[4]) if len(sys.argv) > 4 else FAULT_RANK,
                    attach=sys.argv[5] if len(sys.argv) > 5 else "launcher")
    print(cell.describe())
    print("\n".join(cell.text))
