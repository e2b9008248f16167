"""Reading /proc: process state, CPU, memory, I/O, open files with their offsets, maps.

`ProcFS` takes the /proc root as a parameter so tests can point it at a fake tree.
Every reader raises `ProcGone` when the process vanished and `ProcDenied` when the
kernel refuses; callers turn those into "could not collect" lines, not crashes.
"""
from __future__ import annotations

import math
import os
import platform
import re
import stat as stat_mod
from dataclasses import dataclass
from pathlib import Path

from hangdoc.base.names import read_link, shown
from hangdoc.base.parse import to_int
from hangdoc.base.redact import redact_comm, redact_text
from hangdoc.base.syscalls import OPENS, syscall_name
from hangdoc.model import FdLink, IoCounters, OpenFile, ProcStat, ThreadCounters

# The libraries whose presence changes a diagnosis (fork-unsafe thread pools, NCCL, CUDA).
INTERESTING_LIBS = re.compile(
    r"/(libgomp[^/]*|libiomp5[^/]*|libarm_compute[^/]*|libnccl[^/]*|libcuda\.so[^/]*|"
    r"libcudart[^/]*|libtorch_cuda[^/]*|libopenblas[^/]*|libmkl_[^/]*)$"
)
_PYVER = re.compile(r"/(?:lib)?python(\d+\.\d+)[/.]")


class ProcGone(Exception):
    pass


class ProcDenied(Exception):
    pass


class ProcReused(ProcGone):
    """The process has exited and its pid belongs to a newer process (its start time differs)."""


REUSED = "its pid belongs to a newer process"


@dataclass(frozen=True)
class StatLine:
    pid: int
    comm: str
    state: str
    ppid: int
    pgrp: int
    session: int
    utime_s: float
    stime_s: float
    num_threads: int
    start_time: float   # seconds since the epoch


class ProcFS:
    """A view of one /proc tree (the real one by default)."""

    def __init__(self, root: str | Path = "/proc", arch: str | None = None):
        self.root = Path(root)
        self.arch = arch or platform.machine()   # whose numbers /proc/PID/syscall gives
        self._root = str(root).rstrip("/") or "/"   # string paths: a watch reads hundreds a round
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._boot: float | None = None
        # pid -> fd -> link target, as the last `open_files` of the pid read them: the socket
        # reader takes a rank's from there in the same capture instead of reading them again.
        self.fd_targets: dict[int, dict[int, str]] = {}

    # -- raw access ---------------------------------------------------------------
    def path(self, pid: int, *parts: str) -> str:
        return "/".join((self._root, str(pid)) + parts)

    def read_bytes(self, pid: int, name: str) -> bytes:
        try:
            fd = os.open(f"{self._root}/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, ProcessLookupError):   # ESRCH: exiting, or a kernel thread's environ
            raise ProcGone(f"process {pid} has exited") from None
        except PermissionError:
            raise ProcDenied(f"/proc/{pid}/{name}: permission denied") from None
        try:
            chunks = []
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
        except ProcessLookupError:   # the process exited between open and read
            raise ProcGone(f"process {pid} has exited") from None
        except PermissionError:
            raise ProcDenied(f"/proc/{pid}/{name}: permission denied") from None
        finally:
            os.close(fd)

    def read_text(self, pid: int, name: str) -> str:
        return shown(self.read_bytes(pid, name))

    def exists(self, pid: int) -> bool:
        return os.path.isdir(f"{self._root}/{pid}")

    def pids(self) -> list[int]:
        return [int(name) for name in os.listdir(self._root) if name.isdigit()]

    @property
    def boot_time(self) -> float:
        if self._boot is None:
            self._boot = 0.0
            try:
                for line in (self.root / "stat").read_text().splitlines():
                    if line.startswith("btime "):
                        self._boot = float(line.split()[1])
            except OSError:
                pass
        return self._boot

    # -- parsed views ---------------------------------------------------------------
    def stat(self, pid: int) -> StatLine:
        raw = self.read_text(pid, "stat")
        lpar, rpar = raw.index("("), raw.rindex(")")
        fields = raw[rpar + 2:].split()
        return StatLine(
            pid=pid,
            comm=raw[lpar + 1:rpar],
            state=fields[0],
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            session=int(fields[3]),
            utime_s=int(fields[11]) / self._ticks,
            stime_s=int(fields[12]) / self._ticks,
            num_threads=int(fields[17]),
            start_time=self.boot_time + int(fields[19]) / self._ticks,
        )

    def same_start(self, seen: float, started: float) -> bool:
        """Two start times of one process: equal to the kernel's clock tick (a pid is a process
        only with its start time: a pid freed by an exit is given to the next process in time)."""
        return abs(seen - started) < 0.5 / self._ticks

    def started_as(self, pid: int, started: float) -> bool | None:
        """Whether `pid` is still the process that started at `started`; None when it is gone."""
        try:
            return self.same_start(self.stat(pid).start_time, started)
        except (ProcGone, ProcDenied, ValueError, IndexError):
            return None

    def owner(self, pid: int) -> int | None:
        """The uid the process runs as (the owner of /proc/PID); None when it is gone."""
        try:
            return os.stat(self.path(pid)).st_uid
        except OSError:
            return None

    def cmdline(self, pid: int) -> tuple[str, ...]:
        raw = self.read_bytes(pid, "cmdline")
        return tuple(shown(part) for part in raw.split(b"\0") if part)

    def cmdline_or_empty(self, pid: int | None) -> tuple[str, ...]:
        """The command line, or () when there is no pid (None, 0) or it exited or is unreadable."""
        try:
            return self.cmdline(pid) if pid else ()
        except (ProcGone, ProcDenied):
            return ()

    def environ(self, pid: int) -> dict[str, str]:
        """The environment the process started with (raw: filter before storing it)."""
        env = {}
        for item in self.read_bytes(pid, "environ").split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep:
                env[shown(key)] = shown(value)
        return env

    def exe(self, pid: int) -> str | None:
        try:
            return read_link(self.path(pid, "exe"))
        except OSError:
            return None

    def maps_paths(self, pid: int) -> set[str]:
        paths = set()
        for line in self.read_text(pid, "maps").splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                paths.add(parts[5])
        return paths

    def interesting_libs(self, pid: int) -> tuple[str, ...]:
        return tuple(sorted(p for p in self.maps_paths(pid) if INTERESTING_LIBS.search(p)))

    def io(self, pid: int) -> IoCounters | None:
        try:
            text = self.read_text(pid, "io")
        except ProcDenied:
            return None
        values = {}
        for line in text.splitlines():
            key, _, value = line.partition(":")
            values[key.strip()] = int(value.strip() or 0)
        return IoCounters(
            rchar=values.get("rchar", 0), wchar=values.get("wchar", 0),
            read_bytes=values.get("read_bytes", 0), write_bytes=values.get("write_bytes", 0),
            syscr=values.get("syscr", 0), syscw=values.get("syscw", 0),
        )

    def open_files(self, pid: int) -> tuple[OpenFile, ...]:
        """Regular files the process holds open, with the offset it reads or writes at."""
        fd_dir = self.path(pid, "fd")
        try:
            fds = sorted((int(n) for n in os.listdir(fd_dir) if n.isdigit()))
        except (FileNotFoundError, ProcessLookupError):
            raise ProcGone(f"process {pid} has exited") from None
        except PermissionError:
            raise ProcDenied(f"/proc/{pid}/fd: permission denied") from None
        files = []
        targets = self.fd_targets[pid] = {}
        for fd in fds:
            try:
                target = targets[fd] = read_link(f"{fd_dir}/{fd}")
                if not target.startswith("/") or target.startswith(("/dev/", "/proc/", "/sys/")):
                    continue
                st = os.stat(f"{fd_dir}/{fd}")
                if not stat_mod.S_ISREG(st.st_mode):
                    continue
                info = self.read_text(pid, f"fdinfo/{fd}")
            except (OSError, ProcGone, ProcDenied):
                continue  # the fd closed between listdir and readlink: normal churn
            pos, flags = 0, 0
            for line in info.splitlines():
                if line.startswith("pos:"):
                    pos = int(line.split()[1])
                elif line.startswith("flags:"):
                    flags = int(line.split()[1], 8)
            mode = {0: "r", 1: "w", 2: "rw"}.get(flags & 3, "r")
            files.append(OpenFile(fd=fd, path=target, pos=pos, size=st.st_size, mode=mode))
        return tuple(files)

    def fd_links(self, pid: int, fds: tuple[int, ...] | None = None, limit: int = 16) -> tuple[FdLink, ...]:
        """The descriptors that are not regular files (pipes, FIFOs, sockets, devices): all of them
        (`fds` None, the first `limit`) or the ones named (`(0,)`: stdin)."""
        fd_dir = self.path(pid, "fd")
        if fds is None:
            try:
                fds = tuple(sorted(int(n) for n in os.listdir(fd_dir) if n.isdigit()))
            except (FileNotFoundError, ProcessLookupError):
                raise ProcGone(f"process {pid} has exited") from None
            except PermissionError:
                raise ProcDenied(f"/proc/{pid}/fd: permission denied") from None
        links = []
        for fd in fds:
            try:
                target = read_link(f"{fd_dir}/{fd}")
            except PermissionError:
                raise ProcDenied(f"/proc/{pid}/fd: permission denied") from None
            except OSError:
                continue   # closed, or never open
            kind = _link_kind(target, f"{fd_dir}/{fd}")
            if kind is not None:
                links.append(FdLink(fd, target, kind))
                if len(links) >= limit:
                    break
        return tuple(links)

    def locks_text(self) -> str:
        """/proc/locks, the kernel's table of file locks (OSError when it cannot be read)."""
        with open(f"{self._root}/locks", encoding="utf-8", errors="replace") as f:
            return f.read()

    def thread_counters(self, pid: int, tid: int | None = None) -> ThreadCounters | None:
        """One thread's CPU time and context switches (the main thread by default: tid == pid)."""
        tid = pid if tid is None else tid
        try:
            return self._thread_counters(pid, tid, self.read_text(pid, f"task/{tid}/status"))
        except (ProcGone, ProcDenied):
            return None

    def _thread_counters(self, pid: int, tid: int, status: str) -> ThreadCounters | None:
        """`status` is the thread's: /proc/PID/status is the main thread's own (its switches are
        not summed over the threads, unlike /proc/PID/stat's CPU times)."""
        try:
            raw = self.read_text(pid, f"task/{tid}/stat")
        except (ProcGone, ProcDenied):
            return None
        fields = raw[raw.rindex(")") + 2:].split()
        return ThreadCounters(
            cpu_s=(int(fields[11]) + int(fields[12])) / self._ticks,
            voluntary_switches=_status_field(status, "voluntary_ctxt_switches") or 0,
            involuntary_switches=_status_field(status, "nonvoluntary_ctxt_switches") or 0,
            runqueue_s=self._runqueue_s(pid, tid),
        )

    def _runqueue_s(self, pid: int, tid: int) -> float | None:
        """Seconds the thread has waited on a run queue (schedstat); None where the kernel does not say."""
        try:
            words = self.read_text(pid, f"task/{tid}/schedstat").split()
        except (ProcGone, ProcDenied, OSError):
            return None
        wait = to_int(words[1]) if len(words) >= 2 else None
        return None if wait is None else round(wait / 1e9, 4)

    def sched_clock_ms(self) -> float | None:
        """The scheduler's clock as this thread last saw it (its own se.exec_start, in ms): the
        "now" that other threads' exec_start is read against. None: the kernel does not show it
        (no CONFIG_SCHED_DEBUG)."""
        try:
            return _exec_start_ms(self.read_text("thread-self", "sched"))   # type: ignore[arg-type]
        except (ProcGone, ProcDenied, OSError):
            return None

    def off_cpu_s(self, pid: int, now_ms: float | None, tid: int | None = None) -> float | None:
        """Seconds since the thread (the main thread by default) last ran: how long it has been
        asleep, told by the scheduler without stopping it. `now_ms`: `sched_clock_ms()`, read
        once for a round. None where the kernel shows no scheduler statistics. The clocks of
        two CPUs can differ by a little (tens of ms; more on a VM that loses time to its host):
        it is a lower bound worth seconds, not milliseconds."""
        if now_ms is None:
            return None
        try:
            start = _exec_start_ms(self.read_text(pid, f"task/{pid if tid is None else tid}/sched"))
        except (ProcGone, ProcDenied, OSError):
            return None
        return None if start is None else round(max(0.0, (now_ms - start) / 1000.0), 3)

    def thread_names(self, pid: int, limit: int = 512) -> tuple[str, ...]:
        """The distinct names of a process's threads (at most `limit` threads read), sorted."""
        try:
            tids = os.listdir(f"{self._root}/{pid}/task")[:limit]
        except FileNotFoundError:
            raise ProcGone(f"no process {pid}") from None
        except PermissionError as exc:
            raise ProcDenied(str(exc)) from None
        names = set()
        for tid in tids:
            try:
                names.add(redact_comm(self.read_text(pid, f"task/{tid}/comm").strip()))
            except (ProcGone, ProcDenied, OSError):
                continue             # a thread that ended between the listing and the read
        return tuple(sorted(n for n in names if n))

    def proc_stat(self, pid: int, full: bool = True, links: tuple[int, ...] | None = (),
                  started: float | None = None) -> ProcStat:
        """Everything a sample needs from /proc for one process; `full=False` leaves out the
        kernel wait (wchan, syscall) and the open files, the costly part (about 0.5 ms a process).
        `links`: the descriptors to name when not regular files (None: all, see `fd_links`).
        `started`: the process's start time when it was found; a pid that started otherwise is
        another process now (`ProcReused`), never read as the one found."""
        st = self.stat(pid)
        if started is not None and not self.same_start(st.start_time, started):
            raise ProcReused(f"process {pid} has exited; {REUSED} (started "
                             f"{st.start_time - started:+.2f} s after it)")
        status = self.read_text(pid, "status")
        wchan = self._optional(pid, "wchan") if full else None
        syscall = self._optional(pid, "syscall") if full else None
        try:
            open_files = self.open_files(pid) if full else ()
        except ProcDenied:
            open_files = ()
        try:
            fd_links = self.fd_links(pid, links) if full and links != () else ()
        except ProcDenied:
            fd_links = ()
        return ProcStat(
            state=st.state,
            wchan=wchan if wchan not in (None, "", "0") else None,
            syscall=syscall.split()[0] if syscall else None,
            **(self._syscall(pid, syscall) if syscall else {}),
            utime_s=st.utime_s,
            stime_s=st.stime_s,
            rss_bytes=_rss_bytes(status),
            num_threads=st.num_threads,
            io=self.io(pid),
            open_files=open_files,
            main_thread=self._thread_counters(pid, pid, status),
            full=full,
            fd_links=fd_links,
            cpus_allowed=_status_text(status, "Cpus_allowed_list"),
        )

    def _syscall(self, pid: int, line: str) -> dict:
        """The call /proc/PID/syscall shows, by name; for an open, the path it opens, read from the
        process's memory at the call's path argument (no descriptor exists until open returns)."""
        fields = line.split()
        name = syscall_name(self.arch, fields[0])
        if name not in OPENS:
            return {"syscall_name": name}
        try:
            address = int(fields[1 + OPENS[name]], 16)
        except (IndexError, ValueError):
            return {"syscall_name": name, "syscall_path_error": "its arguments were not shown"}
        path, error = self.read_string(pid, address)
        return {"syscall_name": name, "syscall_path": redact_text(path) if path is not None else None,
                "syscall_path_error": error}

    def read_string(self, pid: int, address: int, limit: int = 4096) -> tuple[str | None, str | None]:
        """A NUL-terminated string of the process's memory (/proc/PID/mem): (text, None) or (None, why)."""
        try:
            with open(f"{self._root}/{pid}/mem", "rb", buffering=0) as mem:
                mem.seek(address)
                data = mem.read(limit)
        except (PermissionError, ProcessLookupError) as exc:
            return None, (f"reading its memory (/proc/{pid}/mem) was refused ({exc.strerror or exc}): "
                          "it needs ptrace rights over the process (the job's user or root, and "
                          "kernel.yama.ptrace_scope 0 or CAP_SYS_PTRACE)")
        except FileNotFoundError:
            return None, "the process has exited"
        except (OSError, OverflowError, ValueError) as exc:
            return None, f"its memory at {address:#x} could not be read ({getattr(exc, 'strerror', None) or exc})"
        return shown(data.split(b"\0", 1)[0]), None

    def _optional(self, pid: int, name: str) -> str | None:
        try:
            return self.read_text(pid, name).strip()
        except ProcDenied:
            return None


def _link_kind(target: str, link: str) -> str | None:
    """"pipe", "fifo", "socket", "tty", "device", "other"; None for a regular file (see open_files)."""
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("socket:"):
        return "socket"
    if target.startswith(("/dev/pts/", "/dev/tty", "/dev/console")):
        return "tty"
    if target.startswith("/dev/"):
        return "device"
    if not target.startswith("/"):
        return "other"          # anon_inode:[eventfd] and the like
    try:
        mode = os.stat(link).st_mode
    except OSError:
        return "other"          # deleted, or gone meanwhile
    if stat_mod.S_ISREG(mode):
        return None
    return "fifo" if stat_mod.S_ISFIFO(mode) else "device" if stat_mod.S_ISCHR(mode) else "other"


def _exec_start_ms(sched: str) -> float | None:
    """se.exec_start of a /proc/PID/sched text (the scheduler's clock, in ms, when the thread last
    ran or had its run time accounted)."""
    for line in sched.splitlines():
        if line.startswith("se.exec_start"):
            try:
                value = float(line.partition(":")[2])
            except ValueError:
                return None
            return value if math.isfinite(value) else None
    return None


def _status_field(status: str, key: str) -> int | None:
    """The first number of one line of a /proc status file ("VmRSS:\t 1234 kB" -> 1234)."""
    at = status.find(f"\n{key}:")
    if at < 0:
        return None
    end = status.find("\n", at + 1)
    words = status[at + len(key) + 2:end if end >= 0 else None].split()
    return to_int(words[0]) if words else 0


def _status_text(status: str, key: str) -> str | None:
    """One line's value of a /proc status file, as written ("Cpus_allowed_list:\t0-3" -> "0-3")."""
    at = status.find(f"\n{key}:")
    if at < 0:
        return None
    end = status.find("\n", at + 1)
    return status[at + len(key) + 2:end if end >= 0 else None].strip() or None


def _rss_bytes(status: str) -> int:
    return (_status_field(status, "VmRSS") or 0) * 1024


def python_version_from_paths(paths: set[str] | tuple[str, ...]) -> str | None:
    for path in paths:
        match = _PYVER.search(path)
        if match:
            return match.group(1)
    return None


def torch_version_from_paths(paths: set[str] | tuple[str, ...]) -> str | None:
    """torch's version, read from the version.py beside the libtorch the job mapped."""
    for path in paths:
        if "/torch/lib/libtorch" in path:
            version_py = Path(path).parent.parent / "version.py"
            try:
                for line in version_py.read_text().splitlines():
                    if line.startswith("__version__"):
                        return line.split("=", 1)[1].strip().strip("'\"")
            except OSError:
                continue
    return None
