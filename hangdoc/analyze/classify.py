"""What a process is doing at one instant, read from its main thread's frames.

Frames are innermost first (py-spy's order). Each classifier returns a state and the
frame that decided it, so a report can cite the evidence.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from hangdoc.base.syscalls import OPENS
from hangdoc.model import CHILD_WAIT_WCHANS, Frame, ProcSample, ProcStat, RankState, Stack, Thread, Wait, WorkerState
from hangdoc.model.stack import DEBUGGER_PACKAGES as _DEBUGGER_PACKAGES, own_frame, per_stack, signature


# c10d's public collectives, as they appear in torch/distributed/distributed_c10d.py.
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "broadcast", "barrier", "monitored_barrier",
    "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_object",
    "all_gather_coalesced", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
    "all_to_all", "all_to_all_single", "gather", "gather_object", "scatter", "scatter_object_list",
    "reduce", "send", "recv", "isend", "irecv", "broadcast_object_list", "batch_isend_irecv",
    "wait", "Work.wait",
})
# Where collectives surface outside c10d: the wrappers' own (DDP, FSDP, Join), named in words. Matched
# by the frame's name or, in torch's own files, its last part (py-spy names methods by their class).
JOIN_ALL_REDUCE = "Join's shadow all-reduce"
JOIN_EXIT = "Join's final all-reduce"
DDP_BUFFERS = "DDP's buffer broadcast in forward"
DDP_PARAMS = "DDP's parameter broadcast"
FSDP_GATHER = "FSDP's parameter all-gather"
FSDP_REDUCE = "FSDP's gradient reduce-scatter"
_COLLECTIVE_FRAMES = {
    "Join.__exit__": JOIN_EXIT, "_JoinHook.main_hook": JOIN_ALL_REDUCE, "_DDPJoinHook.main_hook": JOIN_ALL_REDUCE,
    "_check_global_requires_backward_grad_sync": JOIN_ALL_REDUCE, "_match_all_reduce_for_bwd_pass": JOIN_ALL_REDUCE,
    "_sync_buffers": DDP_BUFFERS, "_sync_module_buffers": DDP_BUFFERS, "_check_and_sync_module_buffers": DDP_BUFFERS,
    "_default_broadcast_coalesced": DDP_BUFFERS, "_distributed_broadcast_coalesced": DDP_BUFFERS,
    "_sync_params_and_buffers": DDP_PARAMS, "_sync_module_states": DDP_PARAMS,
    "_all_gather_flat_param": FSDP_GATHER, "foreach_all_gather": FSDP_GATHER,
    "_reduce_grad": FSDP_REDUCE, "foreach_reduce": FSDP_REDUCE,
}
_WRAPPER_FILES = ("torch/nn/parallel/", "torch/distributed/")
# Native frames of a wait on the other ranks: NCCL's and gloo's collectives, c10d's Work.
_NATIVE_WAITS = ("ProcessGroupNCCL", "ncclGroupEnd", "ncclAllReduce", "ncclKernel", "WorkNCCL",
                 "ProcessGroupGloo", "gloo::", "c10d::Reducer", "Work::wait", "isCompleted")
# Native frames of a host thread waiting on its own GPU's stream: `.item()`, `.cpu()`, `.tolist()`,
# `float(t)` and `torch.cuda.synchronize()` end in one of these. What the GPU does meanwhile tells
# whether the rank computes (its GPU busy) or waits on a collective queued there (analyze/gpu.py).
_GPU_SYNCS = ("cudaStreamSynchronize", "cuStreamSynchronize", "cudaDeviceSynchronize", "cuCtxSynchronize",
              "cudaEventSynchronize", "cuEventSynchronize", "cudaMemcpy", "cuMemcpy", "_local_scalar_dense")
GPU_SYNC = "GPU sync"          # a Reading's detail starts with it: a wait on the GPU stream
WORK_WAIT = "a collective's Work"   # the detail of a rank whose own line waits on a c10d Work it holds
_BACKWARD = ("_engine_run_backward", "run_backward")
# DDP's forward runs collectives from C++ with no Python frame of c10d's above them: the first
# iteration's bucket rebuild, buffer broadcasts, find_unused_parameters' bookkeeping.
_DDP_FORWARD = ("DistributedDataParallel._pre_forward", "DistributedDataParallel._post_forward",
                "_pre_forward", "_post_forward")
_DATALOADER_NEXT = ("_next_data", "_get_data", "_try_get_data", "__next__")
_IO_FRAMES = ("save", "_save", "_legacy_save", "load", "_load", "_legacy_load", "copyfileobj",
              "write", "read", "readinto", "flush", "fsync")
_IO_FILES = ("torch/serialization.py", "shutil.py", "torch/distributed/checkpoint/")
_DECOMPRESS_FILES = ("bz2.py", "lzma.py", "gzip.py", "zlib", "_compression.py", "zstandard", "zstd")
_DECODE_FILES = ("wave.py", "aifc.py", "soundfile", "torchaudio", "librosa", "audioread",
                 "PIL/", "cv2", "av/", "scipy/io/wavfile", "decode")
_READ_FILES = ("tarfile.py", "zipfile.py", "io.py", "_pyio.py", "codecs.py", "shutil.py")
_LOCK_FRAMES = ("acquire", "__enter__", "Condition.wait", "Lock.acquire", "RLock.acquire",
                "Semaphore.acquire", "Event.wait")
# Waits of the job's own line outside collectives and the DataLoader (a Reading's detail is a Wait).
_DEBUGGER_FILES = ("/pdb.py", "/bdb.py", "/cmd.py")
_PROMPTS = ("cmdloop", "_cmdloop", "interaction", "set_trace", "_prompt_for_confirmation")
_LOCK_CALLS = ("flock", "lockf", "lockf64", "__flock", "fcntl_flock", "fcntl_lockf", "fcntl_flock_impl",
               "fcntl_lockf_impl")
_SUBPROCESS_WAITS = ("run", "call", "check_call", "check_output", "getoutput", "getstatusoutput", "Popen.wait",
                     "Popen._wait", "Popen._try_wait", "Popen.communicate", "Popen._communicate")
_HANDOFF_FILES = ("/threading.py", "/queue.py", "concurrent/futures/")
_HANDOFFS = ("Queue.get", "Queue.put", "Queue.join", "Event.wait", "Condition.wait", "Condition.wait_for",
             "Future.result", "Barrier.wait")


@dataclass(frozen=True)
class Reading:
    """A classified instant: the state, a detail ("all_reduce"), and the frame that says so."""

    state: RankState | WorkerState
    detail: str | None
    frame: Frame | None


def _is_c10d(frame: Frame) -> bool:
    return frame.short_filename.endswith("distributed_c10d.py") or "torch/distributed/" in frame.filename


@per_stack
def collective_frame(frames: tuple[Frame, ...]) -> tuple[str, Frame] | None:
    """The outermost collective call on the stack: its name and frame (None: not in one)."""
    found = None
    for frame in frames:  # innermost first: keep the last (outermost) match
        base = frame.name.rsplit(".", 1)[-1]
        if _is_c10d(frame) and (frame.name in COLLECTIVES or base in COLLECTIVES):
            found = (base, frame)
        elif (named := _wrapper_collective(frame)) is not None:
            found = (named, frame)
        elif frame.name == "synchronize" and "torch/cuda" in frame.filename:
            found = (f"{GPU_SYNC} (torch.cuda.synchronize)", frame)
        elif frame.native and found is None and any(k in frame.name for k in _NATIVE_WAITS):
            found = (frame.shown_name[:60], frame)
        elif frame.native and found is None and any(k in frame.name for k in _GPU_SYNCS):
            found = (f"{GPU_SYNC} ({frame.shown_name[:48]})", frame)
    return found


def _wrapper_collective(frame: Frame) -> str | None:
    """The wrapper's collective a frame runs (DDP's buffer broadcast, FSDP's all-gather), in words."""
    if frame.native:
        return None
    named = _COLLECTIVE_FRAMES.get(frame.name)
    if named is None and any(p in frame.filename for p in _WRAPPER_FILES):
        named = _COLLECTIVE_FRAMES.get(frame.name.rsplit(".", 1)[-1])
    return named


def is_gpu_sync(detail: object) -> bool:
    """A reading's detail that names a wait on the rank's own GPU stream (not yet a collective)."""
    return isinstance(detail, str) and detail.startswith(GPU_SYNC)


@per_stack
def _in_dataloader_wait(frames: tuple[Frame, ...]) -> Frame | None:
    for frame in frames:
        if "torch/utils/data/dataloader.py" in frame.filename and frame.name.endswith(_DATALOADER_NEXT):
            if "_MultiProcessingDataLoaderIter" in frame.name or frame.name.endswith(("_get_data", "_try_get_data")):
                return frame
    return None


def _leading(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """The library frames the job's own innermost line called into (all of them when it has none)."""
    own = own_frame(frames)
    return frames[:frames.index(own)] if own is not None else frames


def _is_debugger(frame: Frame) -> bool:
    return frame.filename.endswith(_DEBUGGER_FILES) or any(p in frame.filename for p in _DEBUGGER_PACKAGES)


@dataclass(frozen=True)
class _Lead:
    """What the frames the job's own line called into say, the thread and kernel aside."""

    prompt: bool         # a debugger's prompt
    lock: bool           # a file-lock call
    child: bool          # a wait on a subprocess
    handoff: bool        # a queue or event another thread feeds, below the job's own line


@per_stack
def _lead(frames: tuple[Frame, ...]) -> _Lead:
    lead = _leading(frames)
    return _Lead(
        prompt=any(_is_debugger(f) and f.name.rsplit(".", 1)[-1] in _PROMPTS for f in lead),
        lock=any(f.name.rsplit(".", 1)[-1] in _LOCK_CALLS for f in lead),
        child=any(f.filename.endswith("/subprocess.py") and f.name in _SUBPROCESS_WAITS for f in lead),
        handoff=(bool(lead) and len(lead) < len(frames) and all(any(p in f.filename for p in _HANDOFF_FILES) for f in lead)
                 and any(f.name in _HANDOFFS for f in lead)),
    )


def waits_on(thread: Thread, proc: ProcStat | None = None) -> Wait | None:
    """What a thread's own line waits on outside collectives and the DataLoader, from its frames
    and (for the main thread, whose wchan /proc/PID shows) the kernel: a debugger's prompt, a
    file lock, a child process, or (idle) a queue or event another thread feeds. None: none of these."""
    lead = _lead(thread.frames)
    if lead.prompt:
        return Wait.DEBUGGER
    if proc is not None and proc.in_file_lock or lead.lock:
        return Wait.FILE_LOCK
    if (proc is not None and proc.wchan in CHILD_WAIT_WCHANS) or lead.child:
        return Wait.CHILD
    if not thread.active and lead.handoff:
        return Wait.THREAD
    return None


def _kernel_wait(proc: ProcStat | None) -> Wait | None:
    """What the kernel alone says a process without a stack sleeps on."""
    if proc is None:
        return None
    if proc.in_file_lock:
        return Wait.FILE_LOCK
    return Wait.CHILD if proc.wchan in CHILD_WAIT_WCHANS else None


def classify_rank(sample: ProcSample | None) -> Reading:
    """The state of a rank from its main thread (and the kernel's view of it)."""
    if sample is None or not sample.alive or (sample.proc and sample.proc.state in ("Z", "X")):
        return Reading(RankState.EXITED, None, None)
    main = sample.stack.main if sample.stack else None
    if sample.proc and sample.proc.state == "T":
        # Stopped by a signal (not "t", a tracing stop: a stack read pauses a process that way).
        return Reading(RankState.IDLE, Wait.STOPPED, own_frame(main.frames) if main and main.frames else None)
    if main is None or not main.frames:
        if sample.proc and sample.proc.state == "D":
            return Reading(RankState.IO, "uninterruptible sleep (disk)", None)
        kernel = _kernel_wait(sample.proc)
        if kernel is not None:
            return Reading(RankState.IDLE, kernel, None)
        return Reading(RankState.UNKNOWN, None, None)
    frames = main.frames
    hit = collective_frame(frames)
    if hit:
        return Reading(RankState.COLLECTIVE, hit[0], hit[1])
    dl = _in_dataloader_wait(frames)
    if dl:
        return Reading(RankState.DATALOADER, "DataLoader.__next__", dl)
    wait = waits_on(main, sample.proc)
    if wait is not None:
        # A wait, whatever the job's code: the line it waits at is the evidence.
        return Reading(RankState.IDLE, wait, own_frame(frames) or frames[0])
    # Read with --native, the innermost frames may be addresses py-spy could not name: say the first named one.
    top = next((f for f in frames if f.symbol != "?"), frames[0])
    if any(f.name.endswith(_BACKWARD) for f in frames[:3]) and not main.active:
        # DDP's reducer all-reduces gradients from C++ inside backward: idle there means waiting on it.
        return Reading(RankState.COLLECTIVE, "DDP gradient all_reduce (backward)", top)
    if top.name in _DDP_FORWARD and "torch/nn/parallel/distributed.py" in top.filename and not main.active:
        # Idle in DDP's own forward hooks: its reducer waits on the other ranks from C++.
        return Reading(RankState.COLLECTIVE, "DDP forward sync", top)
    io = _io_frame(frames)
    if io is not None or (sample.proc and sample.proc.state == "D"):
        frame = io or top
        return Reading(RankState.IO, frame.name, frame)
    if main.active or main.owns_gil:
        return Reading(RankState.COMPUTE, top.shown_name, top)
    return Reading(RankState.IDLE, top.shown_name, top)


@per_stack
def _io_frame(frames: tuple[Frame, ...]) -> Frame | None:
    return next((f for f in frames if any(p in f.filename for p in _IO_FILES)), None)


@dataclass(frozen=True)
class _WorkerFrames:
    """What a worker's frames alone say: the frames its loop called into, and the first of them
    that decompresses, decodes or reads."""

    above: tuple[Frame, ...]
    decompressing: Frame | None
    decoding: Frame | None
    reading: Frame | None


@per_stack
def _worker_frames(frames: tuple[Frame, ...]) -> _WorkerFrames:
    loop = next((i for i, f in enumerate(frames) if f.name == "_worker_loop"), len(frames))
    above = frames[:loop]   # the frames the worker loop called into
    return _WorkerFrames(
        above,
        next((f for f in above if any(p in f.filename for p in _DECOMPRESS_FILES) or "decompress" in f.name.lower()), None),
        next((f for f in above if any(p in f.filename for p in _DECODE_FILES) or "decode" in f.name.lower()), None),
        next((f for f in above if any(p in f.filename for p in _READ_FILES)), None),
    )


def classify_worker(sample: ProcSample | None) -> Reading:
    """What a DataLoader worker is doing: decompressing, decoding, reading, locked, idle."""
    if sample is None or not sample.alive or (sample.proc and sample.proc.state in ("Z", "X")):
        return Reading(WorkerState.EXITED, None, None)
    main = sample.stack.main if sample.stack else None
    frames = signature(sample)          # a native probe's Python frames stand for its stack
    if main is None or not frames:
        return Reading(WorkerState.UNKNOWN, None, None)
    seen = _worker_frames(frames)
    above = seen.above
    if above and above[-1].name.endswith("get") and "queue" in above[-1].filename.lower():
        return Reading(WorkerState.IDLE, "waiting for work on its index queue", above[-1])
    wait = waits_on(main, sample.proc) if above else None
    if wait is Wait.FILE_LOCK:
        return Reading(WorkerState.LOCK_WAIT, wait, own_frame(above) or above[0])
    if wait in (Wait.DEBUGGER, Wait.CHILD):
        return Reading(WorkerState.IDLE, wait, own_frame(above) or above[0])
    if seen.decompressing is not None:
        return Reading(WorkerState.DECOMPRESSING, seen.decompressing.short_filename, seen.decompressing)
    if seen.decoding is not None:
        return Reading(WorkerState.DECODING, seen.decoding.name, seen.decoding)
    if above and above[0].name.endswith(("put", "_feed")) and "queue" in above[0].filename.lower():
        return Reading(WorkerState.QUEUE_PUT, above[0].name, above[0])
    opening = _opening(sample.proc) if not main.active and above else None
    if opening is not None:
        return Reading(WorkerState.BLOCKED, opening, own_frame(above) or above[0])
    if not main.active and above:
        top = above[0]
        blocked_in_kernel = sample.proc is not None and sample.proc.syscall in ("202", "98")  # futex
        if top.name.endswith(_LOCK_FRAMES) or blocked_in_kernel:
            return Reading(WorkerState.LOCK_WAIT, top.name, top)
    if seen.reading is not None:
        return Reading(WorkerState.READING, seen.reading.name, seen.reading)
    top = above[0] if above else frames[0]
    return Reading(WorkerState.BUSY if main.active else WorkerState.IDLE, top.name, top)


def _opening(proc) -> str | None:
    """"opening /data/shard-7.tar" for a process asleep in an open of a file by path (an open on a
    dead mount, a FIFO no one writes); None otherwise."""
    if proc is None or proc.syscall_name not in OPENS or proc.state not in ("S", "D"):
        return None
    return f"opening {proc.syscall_path}" if proc.syscall_path else "opening a file"


def main_thread(stack: Stack | None) -> Thread | None:
    return stack.main if stack else None


# A frame of code written inside an expression: it runs on its caller's line.
NESTED_EXPRESSION = re.compile(r"<(?:genexpr|lambda|listcomp|dictcomp|setcomp)>$")


def place(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """The stack (innermost first) with a generator expression, lambda or comprehension that runs
    on its caller's line folded into the caller: two samples of one spin line are one place
    whichever of its frames they caught."""
    i = 0
    while i + 1 < len(frames) and frames[i].is_job_code and NESTED_EXPRESSION.search(frames[i].name) \
            and frames[i].line == frames[i + 1].line and frames[i].filename == frames[i + 1].filename:
        i += 1
    if len(frames) == i + 1 and frames[i].is_job_code and NESTED_EXPRESSION.search(frames[i].name):
        # Nothing below it: a generator expression resumed from C (`all(...)`), whose callers py-spy
        # does not show. Its name says its caller's ("main.<locals>.<genexpr>": main; "<genexpr>":
        # the module's code). A rank's timeline completes it with the caller's frames where it saw
        # them (timeline._Callers).
        name = frames[i].name
        caller = name.rsplit(".<locals>.", 1)[0] if ".<locals>." in name else "<module>"
        return (dataclasses.replace(frames[i], name=caller),)
    return frames[i:] if i else frames


SOCKET_READ = "a socket read"

# What a parked main thread sleeps in, for a poll loop's reading: its Python frames first (a wait
# written in Python), then the kernel's wait channel (time.sleep and select are C: no frame).
_PARKED_FRAMES = (
    (("/threading.py",), "a lock or Event wait"),
    (("/queue.py",), "a queue get"),
    (("/selectors.py", "/asyncio/"), "select/poll"),
    (("/socket.py", "/ssl.py"), SOCKET_READ),
    (("/subprocess.py",), "a subprocess wait"),
    (("/genericpath.py", "/posixpath.py", "/pathlib.py"), "os.path.exists/stat"),
)
_PARKED_WCHANS = (
    (("nanosleep",), "time.sleep"),
    (("poll_schedule_timeout", "do_select", "do_sys_poll", "ep_poll", "core_sys_select"), "select/poll"),
    (("sk_wait_data", "inet_csk_accept", "unix_stream", "tcp_recvmsg", "wait_woken"), SOCKET_READ),
    (("futex",), "a lock or Event wait"),
    (("pipe_read", "pipe_wait", "anon_pipe_read"), "a pipe read"),
    (("do_wait", "kernel_wait4"), "a subprocess wait"),
)
_PARKED_NATIVE = (
    (("nanosleep",), "time.sleep"),
    (("select", "poll"), "select/poll"),
    (("recv",), SOCKET_READ),
    (("pthread_cond", "futex", "sem_"), "a lock or Event wait"),
)


def parked_in(sample: ProcSample | None) -> str | None:
    """What a rank's main thread sleeps in between two tries of a poll or retry loop, in words
    ("time.sleep", "select/poll", "a socket read", "a lock or Event wait", "os.path.exists/stat"):
    the library frames above its own innermost line, else a native frame, else the kernel's wait
    channel. None: it runs, or nothing names its wait."""
    main = sample.stack.main if sample and sample.stack else None
    if main is None or main.active:
        return None
    for frame in main.frames:
        if frame.is_job_code:
            break
        table = _PARKED_NATIVE if frame.native else _PARKED_FRAMES
        where = frame.name if frame.native else frame.filename
        words = next((w for keys, w in table if any(k in where for k in keys)), None)
        if words is not None:
            return words
    wchan = (sample.proc.wchan if sample.proc else None) or ""
    return next((words for keys, words in _PARKED_WCHANS if wchan and any(k in wchan for k in keys)), None)
