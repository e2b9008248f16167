"""Ranks that no environment names, read from the job itself.

`torch.multiprocessing.spawn(main, args=(world, ...), nprocs=N)` and plain `multiprocessing`
launchers start each rank as a child of the script with nothing of its rank in its environment:
the rank is an argument of the function it runs, handed on to
`init_process_group(init_method="tcp://...", rank=..., world_size=...)`. A rank's stack holds it:
`py-spy dump --locals` shows init_process_group's `rank` and `world_size` while the rank is in
it, the job's own function's `rank` and `world_size` arguments while it trains, and the process
index `i` of torch's `_wrap` under that. A DataLoader worker is no rank: its stack holds
`_worker_loop` (a forked one holds its rank's frames under it).
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from typing import Callable

from hangdoc.base.parse import to_int

Runner = Callable[..., subprocess.CompletedProcess]

_SIZE_NAMES = ("world_size", "world", "nprocs", "num_processes", "n_procs")
_WORKER = object()     # a DataLoader worker: not a rank, whatever its frames below hold


@dataclass(frozen=True)
class RankClue:
    """A rank read from a process's stack, and where it was read."""

    rank: int
    world_size: int | None
    source: str                    # "init_process_group(rank=1) in its stack", ...
    master_addr: str | None = None
    master_port: int | None = None


def clue_from_dump(threads: list[dict]) -> RankClue | None | object:
    """The rank a py-spy `--json --locals` dump shows (threads, frames innermost first); `_WORKER`
    for a DataLoader worker; None when the stack does not say."""
    main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0] if threads else None)
    frames = (main or {}).get("frames") or []
    if any(f.get("name") == "_worker_loop" for f in frames):
        return _WORKER
    own = None
    spawned = None
    for frame in frames:
        values = {v.get("name"): v.get("repr") for v in frame.get("locals") or () if v.get("name")}
        name, where = frame.get("name") or "?", frame.get("short_filename") or frame.get("filename") or ""
        if name == "init_process_group" and "torch/distributed" in where:
            rank = to_int(values.get("rank"))
            if rank is not None and rank >= 0:
                size = to_int(values.get("world_size"))
                addr, port = _tcp(values.get("init_method"))
                return RankClue(rank, size if size and size > 0 else None,
                                f"init_process_group(rank={rank}) in its stack", addr, port)
        if name == "_wrap" and "torch/multiprocessing" in where and spawned is None:
            index = to_int(values.get("i"))
            if index is not None:
                spawned = RankClue(index, None, f"torch.multiprocessing.spawn's process index ({index}) in its stack")
        if own is None and "site-packages" not in where and "/lib/python" not in where:
            rank = to_int(values.get("rank"))
            if rank is not None and rank >= 0:
                size = next((s for n in _SIZE_NAMES if (s := to_int(values.get(n)))), None)
                addr, port = _tcp(values.get("init_method") or values.get("init"))
                own = RankClue(rank, size, f"the argument rank={rank} of {name}() in its stack", addr, port)
    if own is not None and spawned is not None and own.world_size is None:
        return own
    return own or spawned


def _tcp(value: str | None) -> tuple[str | None, int | None]:
    text = (value or "").strip("'\"")
    if not text.startswith("tcp://"):
        return None, None
    host, _, port = text[len("tcp://"):].rpartition(":")
    return host or None, to_int(port.split("?")[0])


@dataclass
class StackRanks:
    """Reads a process's rank from its stack, once per process (a watch re-discovers every round).

    `py_spy`: the py-spy binary (None: found beside this interpreter or on PATH, on first use).
    A process whose stack does not say yet (a rank still importing torch) is asked again next time."""

    py_spy: str | None = None
    run: Runner = subprocess.run
    timeout_s: float = 5.0
    _seen: dict = field(default_factory=dict)

    def __call__(self, pid: int, start_time: float | None = None) -> RankClue | None | object:
        key = (pid, start_time)
        if key in self._seen:
            return self._seen[key]
        clue = self._read(pid)
        if clue is not None:
            self._seen[key] = clue
        return clue

    def _read(self, pid: int) -> RankClue | None | object:
        if self.py_spy is None:
            from hangdoc.collect.stacks import find_py_spy
            try:
                self.py_spy = find_py_spy()
            except Exception:   # noqa: BLE001 - no py-spy: no rank from stacks, the attach error says why
                return None
        try:
            done = self.run([self.py_spy, "dump", "--pid", str(pid), "--json", "--locals"],
                            capture_output=True, text=True, timeout=self.timeout_s)
            threads = json.loads(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError):
            return None
        return clue_from_dump(threads) if isinstance(threads, list) else None


def is_worker(clue: object) -> bool:
    return clue is _WORKER
