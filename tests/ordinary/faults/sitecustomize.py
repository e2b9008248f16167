"""A fault injector for unmodified training scripts: put this folder on PYTHONPATH.

Python imports `sitecustomize` at start-up, so every process of the job (the torchrun
launcher, each rank, each DataLoader worker it forks) loads this file. It does nothing unless
HANGDOC_FAULT is set, and nothing in a process without a rank (the launcher, hangdoc itself): RANK,
or where no environment names it (torch.multiprocessing.spawn, Lightning's launcher) the process
group's rank once it is initialised.
It patches torch lazily, as each module finishes importing (torch may not be imported yet):

    torch.optim.optimizer           a global optimizer-step pre-hook and post-hook count the
                                    rank's completed steps (every framework's step ends in
                                    an Optimizer subclass's `step`, which runs these hooks)
    torch.utils.data._utils.fetch   the map and iterable fetchers count the samples a
                                    DataLoader worker fetches
    torch.distributed               init_process_group, for hang_before_init

Configuration (environment only):

    HANGDOC_FAULT          the fault (below); unset: the injector does nothing
    HANGDOC_FAULT_RANK     the rank it strikes (default 1)
    HANGDOC_FAULT_STEP     step faults fire when the rank is about to take its next
                           optimizer step after this many completed ones (default 20; 0: before
                           the first step)
    HANGDOC_FAULT_SAMPLE   worker faults fire in worker HANGDOC_FAULT_WORKER (default 0) of the
                           rank once it has fetched this many samples (default 40; counted per
                           worker process: workers forked anew each epoch count from 0 again)
    HANGDOC_FAULT_GATE     a path: the fault waits until it exists (a watcher attached first)
    HANGDOC_FAULT_RECORD   where the ground truth goes when the fault fires: JSON with kind,
                           rank, pid, worker, time (epoch seconds), step, sample
    HANGDOC_FAULT_DIR      where FIFOs and lock files go (default: the record's folder)
    HANGDOC_FAULT_COUNT    worker_slow: how many samples are slow (default 8), in the first worker
                           process to reach the sample only, so the job ends
    HANGDOC_FAULT_DELAY    worker_slow: seconds per slow sample (default 2); rank_slow: seconds of
                           compute before each optimizer step (default 0.3)

Faults in the rank's main process (at step k on rank r):
    stop, kill9, segv, abrt   SIGSTOP / SIGKILL / SIGSEGV / SIGABRT to itself (no core file)
    oom_kill                  touch 400 MB, then SIGKILL itself (the OOM killer's shape)
    breakpoint                breakpoint() with sys.stdin on a pipe whose write end this process
                              holds and never writes: pdb's prompt waits forever (under torchrun
                              stdin is /dev/null, where pdb would read EOF and quit)
    skip_collective           one extra dist.barrier(): the others' next collective mismatches
    extra_collective          one extra dist.all_reduce of a 3-float tensor
    subprocess_hang           subprocess.run(["cat", fifo]) with no timeout; nobody writes the FIFO
    poll_lock                 poll a lock file that never goes away, forever, counting attempts
                              and sleeping 0.2 s between them (a library's file lock)
    kill_helper_thread        wait on a queue.Queue that a helper thread of the rank's own (a
                              prefetcher) was to fill; the thread dies of an exception first
    rank_slow                 from step k on, compute HANGDOC_FAULT_DELAY s (matmuls) before every
                              optimizer step: a straggler by compute that never stops (slow, not a hang)
    hang_before_init          sleep forever when it calls init_process_group (no step needed)
    raise                     raise RuntimeError (a transient error); with HANGDOC_FAULT_START=k only in
                              the start of the ranks whose TORCHELASTIC_RESTART_COUNT is k (torchrun
                              --max-restarts starts them again), else in every start
Faults in a DataLoader worker of rank r (at sample k):
    worker_futex              take a threading.Lock twice
    worker_flock              flock(LOCK_EX) a file another process (a `sleep` this worker
                              started, holding the lock since before) keeps locked
    worker_socket             connect to a socket that listens and never answers; recv() forever
    worker_kill9, worker_segv SIGKILL / SIGSEGV to itself
    worker_slow               sleep HANGDOC_FAULT_DELAY s per sample for HANGDOC_FAULT_COUNT samples
                              (one batch: 16 s at the defaults; a straggler by data, not a hang)
"""
from __future__ import annotations

import os
import sys

STEP_FAULTS = ("stop", "kill9", "segv", "abrt", "oom_kill", "breakpoint", "skip_collective",
               "extra_collective", "subprocess_hang", "poll_lock", "kill_helper_thread", "rank_slow", "raise")
INIT_FAULTS = ("hang_before_init",)
WORKER_FAULTS = ("worker_futex", "worker_flock", "worker_socket", "worker_kill9", "worker_segv", "worker_slow")
FAULTS = STEP_FAULTS + INIT_FAULTS + WORKER_FAULTS


def _warn(message: str) -> None:
    try:
        print(f"hangdoc fault injector: {message}", file=sys.stderr, flush=True)
    except Exception:
        pass


class _Config:
    def __init__(self, env):
        self.kind = env["HANGDOC_FAULT"]
        if self.kind not in FAULTS:
            raise ValueError(f"unknown HANGDOC_FAULT={self.kind!r}; one of {', '.join(FAULTS)}")
        self.rank = int(env.get("HANGDOC_FAULT_RANK", "1"))
        self.step = int(env.get("HANGDOC_FAULT_STEP", "20"))
        self.sample = int(env.get("HANGDOC_FAULT_SAMPLE", "40"))
        self.worker = int(env.get("HANGDOC_FAULT_WORKER", "0"))
        self.gate = env.get("HANGDOC_FAULT_GATE") or None
        self.record = env.get("HANGDOC_FAULT_RECORD") or None
        default_dir = os.path.dirname(os.path.abspath(self.record)) if self.record else None
        self.dir = env.get("HANGDOC_FAULT_DIR") or default_dir
        self.count = int(env.get("HANGDOC_FAULT_COUNT", "8"))
        self.delay = float(env.get("HANGDOC_FAULT_DELAY", "0.3" if self.kind == "rank_slow" else "2"))
        self.start = env.get("HANGDOC_FAULT_START")    # only in this start of the ranks (None: every one)


class _State:
    steps = 0           # optimizer steps this process completed
    samples = 0         # samples this process fetched as a DataLoader worker
    fired = False
    slow_left = 0       # worker_slow: slow samples still to come in this process
    keep: list = []     # objects that must outlive the fault (a pipe's write end, sockets)


CONFIG: _Config | None = None


def _my_rank() -> int | None:
    """RANK from the environment (torchrun, srun, mpirun style); where no environment names it
    (torch.multiprocessing.spawn, Lightning's own launcher), the process group's, once it is up
    (a forked DataLoader worker keeps its rank's; a spawned one inherits HANGDOC_FAULT_SELF_RANK, which
    the rank sets once its process group is up)."""
    for name in ("RANK", "HANGDOC_FAULT_SELF_RANK"):
        try:
            return int(os.environ[name])
        except (KeyError, ValueError):
            pass
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        return None
    return None


def _targeted() -> bool:
    return _my_rank() == CONFIG.rank


def _this_start() -> bool:
    return CONFIG.start is None or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == CONFIG.start


def _gate_open() -> bool:
    return CONFIG.gate is None or os.path.exists(CONFIG.gate)


def _fault_dir() -> str:
    import tempfile

    path = CONFIG.dir or tempfile.gettempdir()
    os.makedirs(path, exist_ok=True)
    return path


def _write_record(worker: int | None = None) -> None:
    """The ground truth, written once (the first process to fire wins) and atomically."""
    if not CONFIG.record:
        return
    import json
    import time

    body = json.dumps({"kind": CONFIG.kind, "rank": _my_rank(), "pid": os.getpid(), "worker": worker,
                       "time": time.time(), "step": _State.steps,
                       "sample": _State.samples if worker is not None else None})
    try:
        fd = os.open(CONFIG.record + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(body)
    os.link(CONFIG.record + ".tmp", CONFIG.record)


def _no_core_file() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _signal_self(sig) -> None:
    os.kill(os.getpid(), sig)


# ---- faults in a rank's main process -------------------------------------------------------

def _poll_lock(path: str) -> None:
    import time

    attempts = 0
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            attempts += 1
            time.sleep(0.2)
            continue
        os.close(fd)
        return


def _rank_fault() -> None:
    import signal

    kind = CONFIG.kind
    if kind == "poll_lock":
        lock = os.path.join(_fault_dir(), "dataset.lock")
        open(lock, "w").close()       # held by "another process" that never lets go
        _write_record()
        _poll_lock(lock)
        return
    if kind == "oom_kill":
        ballast = b"\x01" * (400 << 20)      # resident: bytes are filled, not lazily mapped
        _State.keep.append(ballast)
    _write_record()
    if kind == "rank_slow":
        _compute_for(CONFIG.delay)
    elif kind == "stop":
        _signal_self(signal.SIGSTOP)
    elif kind in ("kill9", "oom_kill"):
        _signal_self(signal.SIGKILL)
    elif kind == "segv":
        _no_core_file()
        _signal_self(signal.SIGSEGV)
    elif kind == "abrt":
        _no_core_file()
        _signal_self(signal.SIGABRT)
    elif kind == "breakpoint":
        read_end, write_end = os.pipe()
        _State.keep.append(write_end)
        sys.stdin = os.fdopen(read_end, "r")
        os.environ.pop("PYTHONBREAKPOINT", None)
        breakpoint()
    elif kind == "skip_collective":
        import torch.distributed as dist

        dist.barrier()
    elif kind == "extra_collective":
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.zeros(3))
    elif kind == "kill_helper_thread":
        _helper_thread_dies()
    elif kind == "raise":
        raise RuntimeError("the data server dropped the connection (injected)")
    elif kind == "subprocess_hang":
        import subprocess

        fifo = os.path.join(_fault_dir(), "never-written.fifo")
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
        subprocess.run(["cat", fifo], stdout=subprocess.DEVNULL)


def _helper_thread_dies() -> None:
    import queue
    import threading

    batches: queue.Queue = queue.Queue(maxsize=2)
    started = threading.Event()

    def prefetch():
        started.set()
        raise ConnectionResetError("the prefetcher lost its connection to the data server")

    helper = threading.Thread(target=prefetch, name="prefetcher", daemon=True)
    helper.start()
    started.wait()
    batches.get()      # nobody will ever put: the helper is gone


def _before_step(optimizer, args, kwargs) -> None:
    if (CONFIG.kind in STEP_FAULTS and not _State.fired and _State.steps >= CONFIG.step
            and _targeted() and _gate_open() and _this_start()):
        _State.fired = True
        _rank_fault()
    elif CONFIG.kind == "rank_slow" and _State.fired:
        _compute_for(CONFIG.delay)


def _compute_for(seconds: float) -> None:
    """Real CPU work (matmuls) for a fixed wall time: the straggler's extra share of every step."""
    import time

    import torch

    x = torch.randn(96, 96)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        x = torch.tanh(x @ x / 96)


def _after_step(optimizer, args, kwargs) -> None:
    _State.steps += 1


def _patch_optimizer(module) -> None:
    module.register_optimizer_step_pre_hook(_before_step)
    module.register_optimizer_step_post_hook(_after_step)


def _patch_distributed(module) -> None:
    import functools
    import time

    from torch.distributed import distributed_c10d

    original = distributed_c10d.init_process_group

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        rank = kwargs.get("rank")
        targeted = rank == CONFIG.rank if isinstance(rank, int) and rank >= 0 else _targeted()
        if CONFIG.kind == "hang_before_init" and targeted and not _State.fired:
            _State.fired = True
            _write_record()
            while True:
                time.sleep(3600)
        done = original(*args, **kwargs)
        try:    # for DataLoader workers this rank spawns (mp.spawn's ranks spawn theirs): they inherit it
            os.environ["HANGDOC_FAULT_SELF_RANK"] = str(distributed_c10d.get_rank())
        except Exception:
            pass
        return done

    distributed_c10d.init_process_group = init_process_group
    module.init_process_group = init_process_group


# ---- faults in a DataLoader worker ---------------------------------------------------------

_FLOCK_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.set_inheritable(fd, True)
open(sys.argv[2], "w").close()
os.execvp("sleep", ["sleep", "900"])
"""


def _worker_fault(worker_id: int) -> None:
    import signal
    import time

    kind = CONFIG.kind
    if kind == "worker_flock":
        import fcntl
        import subprocess

        path = os.path.join(_fault_dir(), "shard.lock")
        held = path + ".held"
        # -I: the holder ignores PYTHONPATH, so it does not load this injector.
        subprocess.Popen([sys.executable, "-I", "-c", _FLOCK_HOLDER, path, held],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not os.path.exists(held) and time.monotonic() < deadline:
            time.sleep(0.05)
        _write_record(worker_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    if kind == "worker_socket":
        import socket

        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        client = socket.create_connection(server.getsockname())
        _State.keep += [server, client]
        _write_record(worker_id)
        client.recv(1)
        return
    _write_record(worker_id)
    if kind == "worker_futex":
        import threading

        lock = threading.Lock()
        lock.acquire()
        lock.acquire()
    elif kind == "worker_kill9":
        _signal_self(signal.SIGKILL)
    elif kind == "worker_segv":
        _no_core_file()
        _signal_self(signal.SIGSEGV)


def _in_targeted_worker() -> int | None:
    if CONFIG.kind not in WORKER_FAULTS or not _targeted():
        return None
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    if info is None or info.id != CONFIG.worker:
        return None
    return info.id


def _before_fetch(fetcher, possibly_batched_index) -> None:
    worker_id = _in_targeted_worker()
    if worker_id is None:
        return
    first = _State.samples           # this batch holds samples first .. first + count - 1
    count = len(possibly_batched_index) if fetcher.auto_collation else 1
    _State.samples += count
    if _State.samples <= CONFIG.sample or not _gate_open():
        return
    if CONFIG.kind == "worker_slow":
        _slow_samples(worker_id, first)
    elif not _State.fired:
        _State.fired = True
        _worker_fault(worker_id)


def _slow_samples(worker_id: int, first: int) -> None:
    """Sample by sample, as a slow __getitem__ would be; in one worker process of the job only
    (workers forked anew each epoch would slow every epoch down and the job would not end)."""
    import time

    if not _State.fired:
        if CONFIG.record and os.path.exists(CONFIG.record):
            _State.fired = True      # another worker process had its slow samples already
            return
        _State.fired = True
        _State.slow_left = CONFIG.count
        _write_record(worker_id)
    start = max(first, CONFIG.sample)
    for sample in range(start, min(_State.samples, start + _State.slow_left)):
        time.sleep(CONFIG.delay)
        _State.slow_left -= 1


def _patch_fetchers(module) -> None:
    import functools

    for name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
        cls = getattr(module, name)
        original = cls.fetch

        def make(original):
            @functools.wraps(original)
            def fetch(self, possibly_batched_index):
                _before_fetch(self, possibly_batched_index)
                return original(self, possibly_batched_index)
            return fetch

        cls.fetch = make(original)


# ---- lazy patching: run a hook when a module has finished importing ------------------------

_HOOKS = {
    "torch.optim.optimizer": _patch_optimizer,
    "torch.utils.data._utils.fetch": _patch_fetchers,
    "torch.distributed": _patch_distributed,
}


def _run_hook(name: str, module) -> None:
    hook = _HOOKS.pop(name, None)
    if hook is None:
        return
    try:
        hook(module)
    except Exception as exc:      # a broken hook must never break the user's import
        _warn(f"could not patch {name}: {exc!r}")


class _AfterImport:
    """A meta path finder that finds nothing itself: it lets the others find a watched module
    and wraps that module's loader so the hook runs once the module has executed."""

    def find_spec(self, name, path, target=None):
        if name not in _HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        # Loaders of source files are one object per module; a class (builtins) is shared.
        if loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _run_hook(name, module)

        loader.exec_module = exec_module
        return spec


def _install() -> None:
    global CONFIG
    CONFIG = _Config(os.environ)
    for name in list(_HOOKS):
        if name in sys.modules:
            _run_hook(name, sys.modules[name])
    if _HOOKS:
        sys.meta_path.insert(0, _AfterImport())


def _chain_shadowed_sitecustomize() -> None:
    """Run the sitecustomize this one shadows (a distribution's), as Python would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("HANGDOC_FAULT"):
    try:
        _install()
    except Exception as exc:
        _warn(f"not installed: {exc!r}")
try:
    _chain_shadowed_sitecustomize()
except Exception as exc:
    _warn(f"the shadowed sitecustomize failed: {exc!r}")
