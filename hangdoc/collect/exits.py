"""Each watched process's exit, read the moment it dies: its exit code or signal, and the OOM counters.

A pidfd (`os.pidfd_open`, Linux >= 5.3) becomes readable when its process exits. The process
is then a zombie until its parent reaps it (torchrun's agent polls its ranks every monitor
interval, 0.1 s by default), and /proc/PID/stat still holds its exit status: field 52,
exit_code, encoded as waitpid encodes it. A thread of hangdoc's own polls the pidfds, so the
read happens within milliseconds of the exit, whatever the watch loop is doing; the loop's
`wait(timeout)` returns as soon as a rank or the launcher exits.

Where no pidfd can be opened (an older kernel, a seccomp policy, a /proc that is not this
machine's), only the samples see exits: a process found a zombie at a sample is read then,
one found gone is recorded "unseen". Nothing here raises: what could not be read becomes a
"could not read" line on the record.
"""
from __future__ import annotations

import math
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from hangdoc.model import OomCount, ProcessExit, Snapshot

SETTLE_S = 0.3             # how long an exit still under way is read again before it counts
KEEP_QUIET_EXITS = 1024    # exits that wake nobody (DataLoader workers come and go every epoch)
_STAT_EXIT_CODE = 49       # field 52 of /proc/PID/stat, counted from the field after the command name
_STAT_START = 19           # field 22, starttime: tells the watched process from a later one with its pid


def default_pidfd_open(proc_root: str) -> Callable[[int], int] | None:
    """os.pidfd_open for this machine's /proc; None where it does not exist or /proc is another tree."""
    if str(proc_root).rstrip("/") != "/proc":
        return None
    return getattr(os, "pidfd_open", None)


@dataclass
class _Watched:
    pid: int
    wake: bool
    start: str | None              # /proc/PID/stat starttime when it was registered
    oom: tuple[tuple[str, int | None], ...] = ()   # (counter file, count) at registration
    fd: int | None = None
    last_rss: int | None = None
    peak_rss: int | None = None


@dataclass
class ExitWatcher:
    """Reads every watched process's exit as it happens. `watch(pid)` each process, `wait(t)`
    between rounds (returns early when a waking process exits), `observe(snapshot)` after each
    sample; `exits` holds the records. Side effects are parameters with real defaults."""

    proc_root: str = "/proc"
    cgroup_root: str = "/sys/fs/cgroup"
    clock: Callable[[], float] = time.time
    pidfd_open: Callable[[int], int] | None | str = "auto"   # "auto": os.pidfd_open where /proc is this machine's
    sleep: Callable[[float], None] = time.sleep   # the wait where no pidfd can wake it
    poller: Callable[[], object] = select.poll    # a poll object over the pidfds
    background: bool = True        # a thread polls the pidfds (else `wait` polls them itself)

    def __post_init__(self):
        self.proc_root = str(self.proc_root).rstrip("/") or "/"
        if self.pidfd_open == "auto":
            self.pidfd_open = default_pidfd_open(self.proc_root)
        self._lock = threading.Condition()
        self._watched: dict[int, _Watched] = {}
        self._records: dict[int, ProcessExit] = {}
        self._fresh: list[ProcessExit] = []    # recorded since the last `wait`
        self._done: set[int] = set()           # pids whose exit is recorded (kept or not)
        self._quiet: list[int] = []            # pids of records that woke nobody, oldest first
        self._woken = 0                        # exits of waking processes so far
        self._seen_woken = 0                   # ... as of the last `wait`
        self._by_fd: dict[int, int] = {}
        self._poll = self.poller()
        self._pending: list[int] = []          # fds to register with the poll (the polling thread's job)
        self._wake_r, self._wake_w = os.pipe() if self.background else (None, None)
        if self._wake_r is not None:
            os.set_blocking(self._wake_r, False)
            self._poll.register(self._wake_r, select.POLLIN)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._no_pidfd = None if self.pidfd_open is not None else (
            "no pidfd_open here (Linux < 5.3, or a /proc that is not this machine's)")

    # -- what the watch loop calls ------------------------------------------------------------
    def watch(self, pid: int, wake: bool = True) -> None:
        """Start watching `pid` (again: nothing). `wake`: its exit ends a `wait` at once."""
        with self._lock:
            if pid in self._watched or self._closed:
                return
        watched = _Watched(pid, wake, self._start_of(pid), self._oom_counts(pid))
        if self.pidfd_open is not None:
            try:
                watched.fd = self.pidfd_open(pid)
            except ProcessLookupError:
                pass                                   # gone already: the next sample records it
            except OSError as exc:                     # ENOSYS, EPERM (a seccomp policy), EINVAL
                self.pidfd_open = None
                self._no_pidfd = f"pidfd_open failed: {exc.strerror or exc}"
        with self._lock:
            self._watched[pid] = watched
            if watched.fd is not None:
                self._by_fd[watched.fd] = pid
                self._pending.append(watched.fd)
        if watched.fd is not None and self.background:
            self._start_thread()
            os.write(self._wake_w, b"x")

    def wait(self, timeout: float) -> tuple[ProcessExit, ...]:
        """Sleep up to `timeout` s; return sooner when a waking process exits. Returns the exits
        recorded since the last call."""
        deadline = time.monotonic() + max(0.0, timeout)
        if self._woken > self._seen_woken:
            pass                                   # a rank died during the round: no wait at all
        elif self._thread is not None:
            with self._lock:
                self._lock.wait_for(lambda: self._woken > self._seen_woken or self._closed,
                                    timeout=max(0.0, timeout))
        elif self._by_fd:
            while True:
                self._pump(max(0.0, deadline - time.monotonic()))
                if self._woken > self._seen_woken or time.monotonic() >= deadline:
                    break
        else:
            self.sleep(timeout)                    # no pidfd to wake on
        with self._lock:
            self._seen_woken = self._woken
            fresh, self._fresh = self._fresh, []
            return tuple(fresh)

    def observe(self, snapshot: Snapshot) -> None:
        """After a sample: keep each process's memory, and record the exit of any found gone."""
        for sample in snapshot.processes:
            watched = self._watched.get(sample.pid)
            if watched is None:
                continue
            if sample.proc is not None and sample.proc.state not in ("Z", "X"):
                watched.last_rss = sample.proc.rss_bytes
                watched.peak_rss = max(watched.peak_rss or 0, sample.proc.rss_bytes)
            if not sample.alive and sample.pid not in self._done:
                self._record(self._read_exit(watched, snapshot.time))

    @property
    def exits(self) -> tuple[ProcessExit, ...]:
        with self._lock:
            return tuple(sorted(self._records.values(), key=lambda e: (e.time, e.pid)))

    def close(self) -> None:
        """Stop the thread and close the pidfds; the records stay."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
        if self._thread is not None and self._wake_w is not None:
            os.write(self._wake_w, b"x")
            self._thread.join(2.0)
        for fd in list(self._by_fd):
            _close(fd)
        self._by_fd.clear()
        for fd in (self._wake_r, self._wake_w):
            if fd is not None:
                _close(fd)

    # -- the polling --------------------------------------------------------------------------
    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hangdoc-exits", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while not self._closed:
                self._pump(None)
        except Exception:   # noqa: BLE001 - a bug here must not kill the watch: waits become sleeps
            return

    def _pump(self, timeout: float | None) -> None:
        """One poll of the pidfds: every process that exited is read at once, as a zombie."""
        with self._lock:
            pending, self._pending = self._pending, []
        for fd in pending:
            self._poll.register(fd, select.POLLIN)
        try:
            ready = self._poll.poll(None if timeout is None else math.ceil(timeout * 1000))
        except (OSError, InterruptedError):
            return
        now = self.clock()
        for fd, _ in ready:
            if fd == self._wake_r:
                try:
                    os.read(fd, 4096)
                except OSError:
                    pass
                continue
            pid = self._by_fd.get(fd)
            if pid is None:
                continue
            watched = self._watched[pid]
            self._record(self._read_exit(watched, now))
            self._poll.unregister(fd)
            with self._lock:
                self._by_fd.pop(fd, None)
            _close(fd)

    # -- reading an exit ----------------------------------------------------------------------
    def _record(self, exit: ProcessExit) -> None:
        with self._lock:
            known = self._records.get(exit.pid)
            if known is not None and (known.told or not exit.told):
                return          # the first read that tells the status stands
            self._records[exit.pid] = exit
            self._fresh.append(exit)
            self._done.add(exit.pid)
            watched = self._watched.get(exit.pid)
            if watched is not None and watched.wake:
                self._woken += 1
                self._lock.notify_all()
            elif known is None:
                self._quiet.append(exit.pid)
                if len(self._quiet) > KEEP_QUIET_EXITS:
                    self._records.pop(self._quiet.pop(0), None)

    def _read_exit(self, watched: _Watched, now: float) -> ProcessExit:
        pid = watched.pid
        errors: list[str] = []
        code = signal = None
        core = False
        source = "unseen"
        try:
            fields = self._settled_fields(pid)
        except (OSError, ValueError):
            fields = None
            errors.append("exit status: could not read: its parent reaped it before hangdoc could")
        if fields is not None and len(fields) <= _STAT_START:
            fields = None
            errors.append("exit status: could not read: /proc/PID/stat is not what Linux writes")
        if fields is not None:
            if watched.start is not None and fields[_STAT_START] != watched.start:
                errors.append("exit status: could not read: its pid belongs to a newer process")
            elif fields[0] not in ("Z", "X"):
                errors.append(f"exit status: could not read: the process is in state {fields[0]}, not a zombie")
            elif len(fields) <= _STAT_EXIT_CODE:
                errors.append("exit status: could not read: /proc/PID/stat has no exit_code here (Linux < 3.5)")
            elif not self._may_read(pid):
                errors.append("exit status: could not read: the process is another user's (the kernel shows 0)")
            elif not fields[_STAT_EXIT_CODE].lstrip("-").isdigit():
                errors.append("exit status: could not read: exit_code is not a number")
            else:
                status = int(fields[_STAT_EXIT_CODE])
                source = "zombie"
                if os.WIFSIGNALED(status):
                    signal, core = os.WTERMSIG(status), os.WCOREDUMP(status)
                else:
                    code = os.WEXITSTATUS(status)
        if source == "unseen" and watched.fd is None and self._no_pidfd:
            errors.append(f"exit status: read only at the samples: {self._no_pidfd}")
        oom = tuple(OomCount(path, before, self._read_count(path)) for path, before in watched.oom)
        return ProcessExit(pid=pid, time=now, code=code, signal=signal, core_dumped=core, source=source,
                           last_rss_bytes=watched.last_rss, peak_rss_bytes=watched.peak_rss, oom=oom,
                           errors=tuple(errors))

    def _settled_fields(self, pid: int) -> list[str]:
        """/proc/PID/stat once the process is a zombie. A pidfd can wake while the exit is still
        under way (the group leader gone, its other threads still ending: state R or S for a few
        ms), so a live state is read again, briefly, before it counts."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            fields = self._stat_fields(pid)
            if not fields or fields[0] in ("Z", "X") or time.monotonic() >= deadline:
                return fields
            time.sleep(0.002)

    def _stat_fields(self, pid: int) -> list[str]:
        with open(f"{self.proc_root}/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
        return raw[raw.rindex(")") + 2:].split()

    def _start_of(self, pid: int) -> str | None:
        try:
            return self._stat_fields(pid)[_STAT_START]
        except (OSError, ValueError, IndexError):
            return None

    def _may_read(self, pid: int) -> bool:
        """The kernel shows a zombie's exit_code only to its own user (or root): anyone else reads 0."""
        if os.geteuid() == 0:
            return True
        try:
            with open(f"{self.proc_root}/{pid}/status", "rb") as f:
                for line in f.read().decode("utf-8", "replace").splitlines():
                    if line.startswith("Uid:"):
                        return all(int(uid) == os.geteuid() for uid in line.split()[1:4])
        except (OSError, ValueError):
            return False
        return False

    # -- the OOM killer's counters --------------------------------------------------------------
    def _oom_counts(self, pid: int) -> tuple[tuple[str, int | None], ...]:
        """(file, count) of the process's memory cgroup and of the whole machine, now."""
        files = [path for path in (self._memory_cgroup_file(pid), f"{self.proc_root}/vmstat") if path]
        return tuple((path, self._read_count(path)) for path in files)

    def _memory_cgroup_file(self, pid: int) -> str | None:
        """cgroup v1's memory.oom_control where a memory hierarchy is mounted, else v2's memory.events."""
        try:
            with open(f"{self.proc_root}/{pid}/cgroup", "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return None
        v2 = None
        for line in lines:
            hierarchy, _, rest = line.partition(":")
            controllers, _, path = rest.partition(":")
            path = path.rstrip("/")
            if "memory" in controllers.split(","):
                candidate = f"{self.cgroup_root}/memory{path}/memory.oom_control"
                if os.path.exists(candidate):
                    return candidate
            elif hierarchy == "0" and not controllers:
                v2 = path
        if v2 is not None:
            for base in (self.cgroup_root, f"{self.cgroup_root}/unified"):
                candidate = f"{base}{v2}/memory.events"
                if os.path.exists(candidate):
                    return candidate
        return None

    @staticmethod
    def _read_count(path: str) -> int | None:
        """The `oom_kill N` line of memory.events, memory.oom_control or /proc/vmstat."""
        try:
            with open(path, "rb") as f:
                for line in f.read().decode("utf-8", "replace").splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value.strip())
        except (OSError, ValueError):
            return None
        return None


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass

