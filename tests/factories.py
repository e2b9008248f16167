"""Builders of what the tests (and the benchmarks) feed hangdoc, in one place.

- WeNet-style tar shards and data lists (`write_shard`, `write_list`, `write_raw_list`): a
  shard holds `key.wav` + `key.txt` pairs; `drop` leaves members out (a broken pair), `extra`
  adds stray members, `compression` packs it as .tar.bz2 / .tar.gz / .tar.xz.
- A node's bundle with real stack shapes (`node_bundle`): 8 ranks in all_reduce but one
  waiting on its DataLoader while its workers decompress bz2, sampled on the node's own clock.
- `wait_until`: what a test of real processes polls for, with a deadline.
- Two ranks and two file locks (`lock_cycle_bundle`): rank 0 and rank 1's worker 2 each asleep
  on the lock the other holds, or taking one lock in turn and going on.
- Two ranks and a pipe (`pipe_bundle`): rank 1's DataLoader worker, or a child rank 1 waits for,
  asleep reading a pipe whose write end only itself, or rank 1, holds; or one a live process may
  still write.
- Two ranks and a peer that left (`peer_bundle`): rank 0 in all_reduce while rank 1 exited with
  code 0, or while its connection from a peer on another node is in CLOSE_WAIT.
"""
from __future__ import annotations

import dataclasses
import io
import json
import random
import tarfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from hangdoc.model import (
    BUNDLE_SCHEMA, Bundle, Frame, GpuDevice, GpuProcess, GpuState, Host, IoCounters, Job, OpenFile,
    FileLock, Options, PipeEnd, PipeRead, ProcessExit, ProcessInfo, ProcSample, ProcStat, Role, Snapshot, Stack,
    TcpSocket, Thread,
)

MODES = {"none": "w", "bz2": "w:bz2", "gzip": "w:gz", "xz": "w:xz"}


def write_shard(path: str | Path, keys: Iterable[str], *, compression: str = "none", wav_bytes: int = 4000,
                drop: Sequence[str] = (), extra: Sequence[str] = (), seed: int = 0) -> Path:
    path = Path(path)
    rng = random.Random(seed)
    with tarfile.open(path, MODES[compression]) as tar:
        for key in keys:
            for name, data in ((f"{key}.wav", rng.randbytes(wav_bytes)), (f"{key}.txt", f"text of {key}".encode())):
                if name not in drop:
                    _add(tar, name, data)
        for name in extra:
            _add(tar, name, b"stray")
    return path


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_list(path: str | Path, lines: Iterable[str]) -> Path:
    path = Path(path)
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def write_raw_list(path: str | Path, rows: Iterable[tuple[str, str, str]]) -> Path:
    """A raw list: one JSON object with key, wav and txt per line."""
    return write_list(path, (json.dumps({"key": k, "wav": w, "txt": t}) for k, w, t in rows))


# --- a node's bundle ------------------------------------------------------------------------

RANKS_PER_NODE = 8
WORKERS_PER_RANK = 8
SAMPLES = 3
INTERVAL_S = 2.0

_SITE = "/opt/venv/lib/python3.11/site-packages/"
_LIB = "/usr/lib/python3.11/"


def frame(name: str, path: str, line: int = 0, native: bool = False) -> Frame:
    """A stack frame as py-spy records it: its short name is the path under site-packages/, under
    the standard library, or else the file's own name."""
    if "site-packages/" in path:
        short = path.split("site-packages/", 1)[1]
    elif path.startswith(_LIB):
        short = path[len(_LIB):]
    else:
        short = path.rsplit("/", 1)[-1]
    return Frame(name, path, short, line, native)


def _frames(*spec: tuple[str, str, int]) -> tuple[Frame, ...]:
    return tuple(frame(*s) for s in spec)


_TRAIN = (("train_step", "/work/train.py", 121), ("train", "/work/train.py", 203),
          ("main", "/work/train.py", 251), ("<module>", "/work/train.py", 262))
ALL_REDUCE = _frames(
    ("all_reduce", _SITE + "torch/distributed/distributed_c10d.py", 2806),
    ("_exception_logger.<locals>.wrapper", _SITE + "torch/distributed/c10d_logger.py", 81),
    ("Reducer.finalize", _SITE + "torch/nn/parallel/distributed.py", 1410),
    *_TRAIN)
DATALOADER_WAIT = _frames(
    ("wait", _LIB + "multiprocessing/connection.py", 947),
    ("_poll", _LIB + "multiprocessing/connection.py", 440),
    ("Connection.poll", _LIB + "multiprocessing/connection.py", 257),
    ("Queue.get", _LIB + "multiprocessing/queues.py", 113),
    ("_MultiProcessingDataLoaderIter._try_get_data", _SITE + "torch/utils/data/dataloader.py", 1251),
    ("_MultiProcessingDataLoaderIter._get_data", _SITE + "torch/utils/data/dataloader.py", 1412),
    ("_MultiProcessingDataLoaderIter._next_data", _SITE + "torch/utils/data/dataloader.py", 1448),
    ("_BaseDataLoaderIter.__next__", _SITE + "torch/utils/data/dataloader.py", 733),
    ("train", "/work/train.py", 198), ("main", "/work/train.py", 251), ("<module>", "/work/train.py", 262))
_WORKER_BASE = (
    ("_worker_loop", _SITE + "torch/utils/data/_utils/worker.py", 349),
    ("BaseProcess.run", _LIB + "multiprocessing/process.py", 108),
    ("BaseProcess._bootstrap", _LIB + "multiprocessing/process.py", 314),
    ("Popen._launch", _LIB + "multiprocessing/popen_fork.py", 71),
    ("Popen.__init__", _LIB + "multiprocessing/popen_fork.py", 19),
    ("Process._Popen", _LIB + "multiprocessing/context.py", 282),
    ("BaseProcess.start", _LIB + "multiprocessing/process.py", 121),
    ("_MultiProcessingDataLoaderIter.__init__", _SITE + "torch/utils/data/dataloader.py", 1042),
    ("DataLoader._get_iterator", _SITE + "torch/utils/data/dataloader.py", 424),
    ("DataLoader.__iter__", _SITE + "torch/utils/data/dataloader.py", 479),
    ("train", "/work/train.py", 190), ("main", "/work/train.py", 251), ("<module>", "/work/train.py", 262))
WORKER_IDLE = _frames(
    ("wait", _LIB + "multiprocessing/connection.py", 947),
    ("_poll", _LIB + "multiprocessing/connection.py", 440),
    ("Connection.poll", _LIB + "multiprocessing/connection.py", 257),
    ("Queue.get", _LIB + "multiprocessing/queues.py", 113),
    *_WORKER_BASE)
WORKER_BZ2 = _frames(
    ("BZ2Decompressor.decompress", _LIB + "bz2.py", 340),
    ("decompress", _LIB + "bz2.py", 343),
    ("ShardDataset.__iter__", "/work/data.py", 77),
    ("_IterableDatasetFetcher.fetch", _SITE + "torch/utils/data/_utils/fetch.py", 33),
    *_WORKER_BASE)


_PIN_MEMORY = _frames(("wait", _LIB + "threading.py", 331),
                      ("_pin_memory_loop", _SITE + "torch/utils/data/_utils/pin_memory.py", 59))


def _stack(frames: tuple[Frame, ...], tid: int, active: bool, rank: bool) -> Stack:
    main = Thread(tid, "MainThread", active, active, frames)
    if not rank:
        return Stack((main,))
    return Stack((main, Thread(tid + 1, "Thread-2 (_pin_memory_loop)", False, False, _PIN_MEMORY)))


def _stat(cpu: float, io: int, files: tuple[OpenFile, ...] = ()) -> ProcStat:
    return ProcStat(state="S", wchan="futex_wait_queue", syscall="202", utime_s=cpu, stime_s=cpu / 10,
                    rss_bytes=2 << 30, num_threads=24, io=IoCounters(io, io // 2, 0, 0, 1000, 500),
                    open_files=files)


def node_bundle(node: int, nodes: int, culprit_rank: int, t0: float, seed: int = 0,
                ranks_per_node: int = RANKS_PER_NODE, workers: int = WORKERS_PER_RANK,
                samples: int = SAMPLES, run_id: str = "bench-run", pid_base: int = 100,
                interval_s: float = INTERVAL_S) -> Bundle:
    """One node's bundle: its ranks (culprit_rank waits on data, the others in all_reduce).

    Pids start at `pid_base` on every node (alike, as in containers, unless told otherwise);
    the node samples every `interval_s` from t0 plus a random phase of up to 0.5 s.
    """
    rng = random.Random(seed * 7919 + node)
    world = nodes * ranks_per_node
    phase = rng.uniform(0.0, 0.5)                       # each node's own clock and rhythm
    launcher = pid_base - 1
    env_common = {"MASTER_ADDR": "node0000", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": run_id,
                  "WORLD_SIZE": str(world), "GROUP_RANK": str(node), "GROUP_WORLD_SIZE": str(nodes),
                  "LOCAL_WORLD_SIZE": str(ranks_per_node), "OMP_NUM_THREADS": "1"}
    procs = [ProcessInfo(launcher, 1, Role.LAUNCHER, ("/opt/venv/bin/python", "-m", "torch.distributed.run",
                                                      f"--nnodes={nodes}", "train.py"), "/usr/bin/python3.11", 1.7e9)]
    ranks = []
    for local in range(ranks_per_node):
        rank = node * ranks_per_node + local
        pid = pid_base + local * (workers + 1)
        env = dict(env_common, RANK=str(rank), LOCAL_RANK=str(local), CUDA_VISIBLE_DEVICES=str(local))
        info = ProcessInfo(pid, launcher, Role.RANK, ("/opt/venv/bin/python", "-u", "train.py", "--config", "big.yaml"),
                           "/usr/bin/python3.11", 1.7e9 + 5, env, rank, local, node, world, pid,
                           libs=("/usr/lib/libnccl.so.2", "/usr/lib/libcuda.so.1", "/opt/venv/lib/libgomp.so.1"))
        procs.append(info)
        kids = []
        for w in range(workers):
            kid = ProcessInfo(pid + 1 + w, pid, Role.WORKER, info.cmdline, info.exe, 1.7e9 + 9, env, rank, local,
                              node, world, pid, w, workers, "fork", info.libs)
            procs.append(kid)
            kids.append(kid)
        ranks.append((info, kids))
    snapshots = []
    for k in range(samples):
        time_k = t0 + phase + k * interval_s
        rows = []
        for info, kids in ranks:
            culprit = info.rank == culprit_rank
            rows.append(ProcSample(info.pid, True, _stat(100.0 + rng.random() * 0.01, 10 << 20),
                                   _stack(DATALOADER_WAIT if culprit else ALL_REDUCE, info.pid, False, True)))
            for kid in kids:
                shard = OpenFile(40, f"/data/shards/shard_{kid.pid % 997:06d}.tar.bz2", (k + 1) << 20, 512 << 20)
                if culprit:
                    rows.append(ProcSample(kid.pid, True, _stat(50.0 + 1.9 * k, (k + 1) << 22, (shard,)),
                                           _stack(WORKER_BZ2, kid.pid, True, False)))
                else:
                    rows.append(ProcSample(kid.pid, True, _stat(20.0, 4 << 20, (shard,)),
                                           _stack(WORKER_IDLE, kid.pid, False, False)))
        devices = tuple(GpuDevice(i, f"GPU-{node:04d}-{i}", "NVIDIA H100 80GB HBM3", 0, 0, 30 << 30, 80 << 30,
                                  70.0, 700.0, 1980, 1980, (GpuProcess(info.pid, 30 << 30),))
                        for i, (info, _) in enumerate(ranks))
        rows.append(ProcSample(launcher, True, _stat(3.0, 1 << 20), None))
        snapshots.append(Snapshot(time_k, 0.4, tuple(rows), GpuState("ok", None, "550.54", devices)))
    job = Job(run_id, "node0000", 29500, world, launcher, tuple(procs))
    host = Host(f"node{node:04d}", "x86_64", "5.15.0", 96, "3.11", "2.13.0")
    return Bundle(BUNDLE_SCHEMA, "0.1.0", t0 + 10, host, job, tuple(snapshots),
                  options=Options(interval_s=interval_s, hang_after_s=max(1, samples - 1) * interval_s))


def save_node(bundle: Bundle, path: str | Path) -> Path:
    """Save a node's bundle as a watch does: with the digest its diagnosis made."""
    from hangdoc.analyze.diagnose import node_digest
    from hangdoc.bundle.files import save_bundle

    return save_bundle(bundle, path, node_digest(bundle) if bundle.samples else None)


def wait_until(check, timeout: float = 5.0) -> bool:
    """Poll `check` until it holds (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


# --- a wait-for cycle on file locks --------------------------------------------------------------

CACHE_LOCK, DOWNLOAD_LOCK = "/data/cache.lock", "/data/dl.lock"
LOCK_RANK0, LOCK_RANK1, LOCK_WORKER = 300, 400, 403
_FETCH = (("fetch_shard", "/work/data.py", 31), ("train", "/work/train.py", 198), ("main", "/work/train.py", 251),
          ("<module>", "/work/train.py", 262))
_CACHED = (("CachedShards.__getitem__", "/work/data.py", 52),
           ("_MapDatasetFetcher.fetch", _SITE + "torch/utils/data/_utils/fetch.py", 54), *_WORKER_BASE)


def _lock_stat(cpu: float, lock: FileLock | None) -> ProcStat:
    """Asleep on `lock` (the kernel's flock wait, /proc/locks naming it), or running (None)."""
    return ProcStat(state="S" if lock else "R", wchan="locks_lock_inode_wait" if lock else None,
                    syscall="73" if lock else "running", utime_s=cpu, stime_s=cpu / 10, rss_bytes=1 << 30,
                    num_threads=4, io=IoCounters(1 << 20, 1 << 19, 0, 0, 100, 50), locks=(lock,) if lock else ())


def _flock(path: str, inode: int, holder: int) -> FileLock:
    return FileLock("FLOCK", "WRITE", f"fe:00:{inode}", path, holder, ("/opt/venv/bin/python", "-u", "train.py"))


def lock_cycle_bundle(cycle: bool = True, samples: int = 8, interval_s: float = INTERVAL_S, t0: float = 1.7e9) -> Bundle:
    """Rank 0 fetching a shard and rank 1 (its DataLoader worker 2) reading the cache, each taking
    cache.lock and dl.lock in the other order. `cycle`: from the third sample on, rank 0 sleeps on
    cache.lock held by the worker while the worker sleeps on dl.lock held by rank 0, their CPU flat.
    Otherwise they contend for cache.lock in turn: at each sample one sleeps on it while the other
    holds it and works, and the next sample the other way round."""
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "locks", "MASTER_PORT": "29500"}
    cmd = ("/opt/venv/bin/python", "-u", "train.py")
    launcher = LOCK_RANK0 - 1
    rank0 = ProcessInfo(LOCK_RANK0, launcher, Role.RANK, cmd, "/usr/bin/python3.11", t0 - 30,
                        dict(env, RANK="0", LOCAL_RANK="0"), 0, 0, 0, 2, LOCK_RANK0)
    rank1 = ProcessInfo(LOCK_RANK1, launcher, Role.RANK, cmd, "/usr/bin/python3.11", t0 - 30,
                        dict(env, RANK="1", LOCAL_RANK="1"), 1, 1, 0, 2, LOCK_RANK1)
    workers = [ProcessInfo(LOCK_RANK1 + 1 + w, LOCK_RANK1, Role.WORKER, cmd, "/usr/bin/python3.11", t0 - 20,
                           rank1.env, 1, 1, 0, 2, LOCK_RANK1, w, 3, "fork") for w in range(3)]
    procs = (ProcessInfo(launcher, 1, Role.LAUNCHER, ("/opt/venv/bin/python", "-m", "torch.distributed.run",
                                                      "--nproc_per_node=2", "train.py"), "/usr/bin/python3.11", t0 - 31),
             rank0, rank1, *workers)
    snapshots = []
    for k in range(samples):
        stuck = cycle and k >= 2
        cpu0, cpuw = (10.0 + 0.3 * min(k, 2), 5.0 + 0.3 * min(k, 2)) if cycle else (10.0 + 0.3 * k, 5.0 + 0.3 * k)
        if stuck:
            wait0, waitw = _flock(CACHE_LOCK, 11, LOCK_WORKER), _flock(DOWNLOAD_LOCK, 12, LOCK_RANK0)
        elif cycle:
            wait0 = waitw = None
        else:
            wait0, waitw = (_flock(CACHE_LOCK, 11, LOCK_WORKER), None) if k % 2 else (None, _flock(CACHE_LOCK, 11, LOCK_RANK0))
        rows = [ProcSample(LOCK_RANK0, True, _lock_stat(cpu0, wait0), _stack(_frames(*_FETCH), LOCK_RANK0, not wait0, True)),
                ProcSample(LOCK_RANK1, True, _stat(20.0, 1 << 20), _stack(DATALOADER_WAIT, LOCK_RANK1, False, True)),
                ProcSample(launcher, True, _stat(3.0, 1 << 20), None)]
        for w in workers:
            if w.pid == LOCK_WORKER:
                rows.append(ProcSample(w.pid, True, _lock_stat(cpuw, waitw), _stack(_frames(*_CACHED), w.pid, not waitw, False)))
            else:
                rows.append(ProcSample(w.pid, True, _stat(4.0, 1 << 20), _stack(WORKER_IDLE, w.pid, False, False)))
        snapshots.append(Snapshot(t0 + k * interval_s, 0.1, tuple(rows), GpuState("unavailable", "GPU sampling was not requested")))
    job = Job("locks", "localhost", 29500, 2, launcher, procs)
    host = Host("node0", "x86_64", "5.15.0", 8, "3.11", "2.3.0")
    return Bundle(BUNDLE_SCHEMA, "0.1.0", t0 + samples * interval_s, host, job, tuple(snapshots),
                  options=Options(interval_s=interval_s))


# --- a pipe no process can write, a peer that left -------------------------------------------------

PIPE_RANK0, PIPE_RANK1, PIPE_WORKER, PIPE_CHILD, PIPE_DECODER = 500, 600, 601, 610, 611
PIPE = "pipe:[88123]"
_NO_GPU = GpuState("unavailable", "GPU sampling was not requested")
_READ_CLIP = (("decode_clip", "/work/data.py", 40), ("Clips.__iter__", "/work/data.py", 61),
              ("_IterableDatasetFetcher.fetch", _SITE + "torch/utils/data/_utils/fetch.py", 33), *_WORKER_BASE)
_TIMER = _frames(("wait", _LIB + "threading.py", 331), ("Event.wait", _LIB + "threading.py", 629),
                 ("Timer.run", _LIB + "threading.py", 1428), ("Thread._bootstrap", _LIB + "threading.py", 1002))
_POPEN_WAIT = _frames(("Popen._try_wait", _LIB + "subprocess.py", 1955), ("Popen._wait", _LIB + "subprocess.py", 1997),
                      ("Popen.wait", _LIB + "subprocess.py", 1264), ("save_audio", "/work/train.py", 140), *_TRAIN[1:])
_COMPUTE = _frames(*_TRAIN)


def _two_ranks(name: str, rank0: int, rank1: int, t0: float, env_extra: dict | None = None) -> list[ProcessInfo]:
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": name, "MASTER_PORT": "29500",
           **(env_extra or {})}
    cmd = ("/opt/venv/bin/python", "-u", "train.py")
    return [ProcessInfo(rank0 - 1, 1, Role.LAUNCHER, ("/opt/venv/bin/python", "-m", "torch.distributed.run",
                                                      "--nproc_per_node=2", "train.py"), "/usr/bin/python3.11", t0 - 31),
            *(ProcessInfo(pid, rank0 - 1, Role.RANK, cmd, "/usr/bin/python3.11", t0 - 30,
                          dict(env, RANK=str(n), LOCAL_RANK=str(n)), n, n, 0, 2, pid) for n, pid in enumerate((rank0, rank1)))]


def _asleep(wchan: str, syscall: str, cpu: float, threads: int = 1, **fields) -> ProcStat:
    return ProcStat(state="S", wchan=wchan, syscall=syscall, utime_s=cpu, stime_s=0.0, rss_bytes=1 << 30,
                    num_threads=threads, io=IoCounters(1 << 20, 1 << 19, 0, 0, 100, 50), **fields)


def _running(cpu: float, threads: int = 1, **fields) -> ProcStat:
    return ProcStat(state="R", wchan=None, syscall="running", utime_s=cpu, stime_s=0.0, rss_bytes=1 << 30,
                    num_threads=threads, io=IoCounters(1 << 20, 1 << 19, 0, 0, 100, 50), **fields)


def pipe_bundle(writer: str = "self", reader: str = "worker", samples: int = 8, interval_s: float = INTERVAL_S,
                t0: float = 1.7e9) -> Bundle:
    """Rank 0 in all_reduce, rank 1 waiting on its DataLoader while its worker 0 (`reader`
    "worker") decodes clips through a pipe; from the third sample on the worker sleeps reading
    PIPE (its fd 5), its CPU flat. Who holds the pipe's write end (`writer`): "self" the worker
    alone (fd 6), "decoder" the worker and its decoder child, alive and asleep between two writes
    (a time.sleep), "outside" a process that is not the job's, "timer" the worker alone but with a
    threading.Timer thread beside its main one, "fifo" / "fifo-deleted" the worker alone on a FIFO
    whose path is there / gone, "fed" the worker alone, but reading only at the third sample (its
    data came: running from the fourth). `reader` "child": rank 1 waits for a child (Popen.wait) that
    reads PIPE (its fd 0) whose write end only rank 1 holds (fd 9); `writer` "sibling" adds a second
    live child of rank 1, asleep in a time.sleep (a wait for any child would end with it)."""
    procs = _two_ranks("pipes", PIPE_RANK0, PIPE_RANK1, t0)
    rank1 = procs[2]
    worker = ProcessInfo(PIPE_WORKER, PIPE_RANK1, Role.WORKER, rank1.cmdline, rank1.exe, t0 - 20, rank1.env, 1, 1, 0,
                         2, PIPE_RANK1, 0, 1, "fork")
    child = ProcessInfo(PIPE_CHILD, PIPE_RANK1, Role.CHILD, ("sox", "-", "-r", "16000", "out.wav"), "/usr/bin/sox",
                        t0 - 5, {}, rank_pid=PIPE_RANK1)
    decoder = ProcessInfo(PIPE_DECODER, PIPE_CHILD if reader == "child" else PIPE_WORKER, Role.CHILD,
                          ("ffmpeg", "-i", "clip.flac", "-f", "s16le", "-"), "/usr/bin/ffmpeg", t0 - 4, {},
                          rank_pid=PIPE_RANK1)
    extra = [decoder] if writer in ("decoder", "sibling") else []
    if writer == "sibling":
        extra = [dataclasses.replace(decoder, ppid=PIPE_RANK1)]
    procs += [worker, child] if reader == "child" else [worker]
    procs += extra
    target = {"fifo": "/tmp/clips.fifo", "fifo-deleted": "/tmp/clips.fifo (deleted)"}.get(writer, PIPE)
    if reader == "child":
        ends = (PipeEnd(PIPE_RANK1, 9),)
    else:
        ends = {"decoder": (PipeEnd(PIPE_WORKER, 6), PipeEnd(PIPE_DECODER, 1)),
                "outside": (PipeEnd(99_999, 1),)}.get(writer, (PipeEnd(PIPE_WORKER, 6),))
    snapshots = []
    for k in range(samples):
        reading = k >= 2 and not (writer == "fed" and k > 2)
        cpu = 5.0 + 0.3 * (min(k, 2) if reading or writer != "fed" else k)
        pipe = PipeRead(0 if reader == "child" else 5, target, ends)
        rows = [ProcSample(PIPE_RANK0, True, _asleep("futex_wait_queue", "202", 10.0, 24),
                           _stack(ALL_REDUCE, PIPE_RANK0, False, True)),
                ProcSample(procs[0].pid, True, _stat(3.0, 1 << 20), None)]
        if reader == "child":
            rows.append(ProcSample(PIPE_RANK1, True, _asleep("do_wait", "61", 20.0, 24),
                                   _stack(_POPEN_WAIT, PIPE_RANK1, False, True)))
            rows.append(ProcSample(PIPE_WORKER, True, _stat(4.0, 1 << 20), _stack(WORKER_IDLE, PIPE_WORKER, False, False)))
            rows.append(ProcSample(PIPE_CHILD, True, _asleep("anon_pipe_read", "0", cpu, pipe_read=pipe) if reading
                                   else _running(cpu)))
        else:
            rows.append(ProcSample(PIPE_RANK1, True, _asleep("futex_wait_queue", "202", 20.0, 24),
                                   _stack(DATALOADER_WAIT, PIPE_RANK1, False, True)))
            threads = 2 if writer == "timer" else 1
            stack = Stack((Thread(PIPE_WORKER, "MainThread", not reading, not reading, _frames(*_READ_CLIP)),)
                          + ((Thread(PIPE_WORKER + 1, "Thread-1", False, False, _TIMER),) if threads == 2 else ()))
            rows.append(ProcSample(PIPE_WORKER, True, _asleep("anon_pipe_read", "0", cpu, threads, pipe_read=pipe)
                                   if reading else _running(cpu, threads), stack))
        for proc in extra:
            rows.append(ProcSample(proc.pid, True, _asleep("hrtimer_nanosleep", "35", 1.0 + 0.01 * k)))
        snapshots.append(Snapshot(t0 + k * interval_s, 0.1, tuple(rows), _NO_GPU))
    job = Job("pipes", "localhost", 29500, 2, procs[0].pid, tuple(procs))
    return Bundle(BUNDLE_SCHEMA, "0.1.0", t0 + samples * interval_s, Host("node0", "x86_64", "6.18.0", 8, "3.11", "2.3.0"),
                  job, tuple(snapshots), options=Options(interval_s=interval_s))


PEER_RANK0, PEER_RANK1 = 700, 800
LISTENER = "10.0.0.1:41000"
REMOTE_PEER = "10.0.0.2:51234"


def peer_bundle(shape: str = "exited", samples: int = 8, interval_s: float = INTERVAL_S, t0: float = 1.7e9) -> Bundle:
    """Two ranks stepping together for two samples (each sample a step further, their CPU rising),
    then, from the third on, rank 0 in all_reduce, its CPU flat. `shape` "exited": rank 1 exited
    with code 0 just before the third sample; "failed": with code 1; "exited-late": rank 1 exited
    with code 0, but rank 0 computes on (its own checkpoint) instead of waiting; "closed": rank 1 waits
    in all_reduce too, and rank 0's connection from a peer on another node, accepted on its
    listening port, is in CLOSE_WAIT; "closed-web": the connection in CLOSE_WAIT is rank 0's own to
    a web service; "closed-stepping": rank 0's listener connection is in CLOSE_WAIT while both ranks
    keep stepping."""
    procs = _two_ranks("peers", PEER_RANK0, PEER_RANK1, t0)
    gone = shape in ("exited", "failed", "exited-late")
    left_at = t0 + 2 * interval_s - 0.5
    stepping = shape == "closed-stepping"
    snapshots = []
    for k in range(samples):
        stuck = k >= 2 and not stepping
        rows = [ProcSample(procs[0].pid, True, _stat(3.0, 1 << 20), None)]
        socks = (TcpSocket("0.0.0.0:41000", "0.0.0.0:0", "LISTEN"), TcpSocket("127.0.0.1:45000", "127.0.0.1:46000",
                                                                             "ESTABLISHED" if not gone or k < 2 else "CLOSE_WAIT"))
        if k >= 2 and shape in ("closed", "closed-stepping"):
            socks += (TcpSocket(LISTENER, REMOTE_PEER, "CLOSE_WAIT"),)
        if k >= 2 and shape == "closed-web":
            socks += (TcpSocket("10.0.0.1:53312", "93.184.216.34:443", "CLOSE_WAIT"),)
        busy = not stuck or shape == "exited-late"
        cpu0 = 10.0 + 0.5 * (k if busy else 2)
        frames0 = _COMPUTE if busy else ALL_REDUCE
        stat0 = (_running(cpu0, 24, sockets=socks) if busy
                 else _asleep("futex_wait_queue", "202", cpu0, 24, sockets=socks))
        rows.append(ProcSample(PEER_RANK0, True, stat0, _stack(frames0, PEER_RANK0, busy, True)))
        if gone and k >= 2:
            rows.append(ProcSample(PEER_RANK1, False, None, None, ("proc: could not collect: the process has exited",)))
        else:
            socks1 = (TcpSocket("0.0.0.0:42000", "0.0.0.0:0", "LISTEN"), TcpSocket("127.0.0.1:46000", "127.0.0.1:45000",
                                                                                 "ESTABLISHED"))
            cpu1 = 20.0 + 0.5 * (k if not stuck else 2)
            stat1 = (_running(cpu1, 24, sockets=socks1) if not stuck
                     else _asleep("futex_wait_queue", "202", cpu1, 24, sockets=socks1))
            rows.append(ProcSample(PEER_RANK1, True, stat1, _stack(_COMPUTE if not stuck else ALL_REDUCE, PEER_RANK1,
                                                                   not stuck, True)))
        snapshots.append(Snapshot(t0 + k * interval_s, 0.1, tuple(rows), _NO_GPU, output_step=k if not stuck else 2))
    exits = (ProcessExit(PEER_RANK1, left_at, code=1 if shape == "failed" else 0, source="zombie"),) if gone else ()
    job = Job("peers", "localhost", 29500, 2, procs[0].pid, tuple(procs))
    return Bundle(BUNDLE_SCHEMA, "0.1.0", t0 + samples * interval_s, Host("node0", "x86_64", "6.18.0", 8, "3.11", "2.3.0"),
                  job, tuple(snapshots), options=Options(interval_s=interval_s), exits=exits)


# --- crafted but legal bundles that once cost minutes or gigabytes (issue 35, item 9) ----------------


def _golden(name: str = "barrier-mismatch") -> dict:
    return json.loads((Path(__file__).resolve().parent / "golden" / name / "bundle.json").read_text())


def crowded_v1_bundle(ranks: int = 200_000) -> bytes:
    """A v1 bundle of `ranks` rank processes, one sample each, zstd-compressed (200,000: 1 MB, 226 MB
    of JSON; `report` took 77 s and 1.66 GB)."""
    import msgspec
    import zstandard

    bundle = _golden()
    rank = next(p for p in bundle["job"]["processes"] if p["role"] == "rank")
    sample = next(s for s in bundle["samples"][-1]["processes"] if s["pid"] == rank["pid"])
    main = dict(next(t for t in sample["stack"]["threads"] if t["name"] == "MainThread"), loop=None)
    lean = {k: v for k, v in rank.items() if k not in ("env", "libs")}
    stack = dict(sample["stack"], threads=[main])
    procs = [dict(lean, pid=10_000 + r, ppid=1, rank=r, local_rank=0, group_rank=r, world_size=ranks, cmdline=["python"])
             for r in range(ranks)]
    samples = [{"pid": p["pid"], "alive": True, "proc": None, "stack": stack} for p in procs]
    crowded = dict(bundle, job=dict(bundle["job"], world_size=ranks, processes=procs),
                   samples=[dict(bundle["samples"][-1], processes=samples)], logs=[])
    return zstandard.ZstdCompressor(level=3).compress(msgspec.json.encode(crowded))


def deep_stack_bundle(frames: int = 200_000, ranks: int = 2_000, samples: int = 2) -> bytes:
    """A v2 bundle whose one stack, `frames` deep, is named by `ranks` ranks in each of its last
    `samples` samples, zstd-compressed (200,000 x 2,000: 18 KB; `report` ran past 90 s; 750 x 10,000
    in one sample, 7.5 M frames within the 8 M budget: past 140 s)."""
    import zstandard

    from hangdoc.bundle import codec
    from hangdoc.bundle.files import bundle_from_json

    bundle = bundle_from_json(json.dumps(_golden()))
    doc = json.loads(codec.encode(bundle))
    body = doc["bundle"]
    rank = next(p for p in body["job"]["processes"] if p["role"] == "rank")
    sample = next(s for s in body["samples"][-1]["processes"] if s["pid"] == rank["pid"])
    doc["frames"] = doc["frames"][:1]
    doc["stacks"] = [{"threads": [{"tid": 1, "name": "MainThread", "active": True, "owns_gil": True,
                                   "frames": [0] * frames}], "native": False, "took_s": 0.01}]
    procs = [dict(rank, pid=10_000 + r, ppid=1, rank=r, local_rank=r % 8, group_rank=r // 8, world_size=ranks, env={})
             for r in range(ranks)]
    body["job"] = dict(body["job"], world_size=ranks, processes=procs)
    body["samples"] = [dict(s, processes=[dict(sample, pid=p["pid"], stack=0) for p in procs])
                       for s in body["samples"][-samples:]]
    return zstandard.ZstdCompressor(level=19).compress(json.dumps(doc, separators=(",", ":")).encode())


def far_apart_bundle(span: float = 1e11) -> bytes:
    """A v1 bundle whose samples run from -`span` to +`span` s, each within the time budget
    (`--format html` drew a tick every 7,200 s of it: past 1.1 GB). The capture says it spans them
    (its processes started at -`span`, it was saved at +`span`): samples outside it are set aside."""
    bundle = _golden()
    bundle["created"] = span
    for proc in bundle["job"]["processes"]:
        proc["start_time"] = -span
    last = len(bundle["samples"]) - 1
    for i, sample in enumerate(bundle["samples"]):
        sample["time"] = -span + 2 * span * i / last
    return json.dumps(bundle).encode()


def pickle_bomb_checkpoint(path: str | Path, mib: int = 300) -> Path:
    """A torch zip checkpoint whose `archive/data.pkl` is `mib` MiB of `N` opcodes, each pushing a
    None: 307 KB on disk for 300 MiB (`check checkpoint` took 131 s, past its 120 s, and 1 GB)."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("archive/version", "3\n")
        with archive.open("archive/data.pkl", "w", force_zip64=True) as member:
            member.write(b"\x80\x02")
            chunk = b"N" * (1 << 20)
            for _ in range(mib):
                member.write(chunk)
            member.write(b".")
    return Path(path)
