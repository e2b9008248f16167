"""Jobs hangdoc starts and must end: in a session of their own, and ended whole.

torchrun gives every rank a session (and process group) of its own, so killing the
launcher's group leaves the ranks running as orphans. `stop_job` signals the launcher
(which forwards SIGTERM to the ranks), then hunts down every process of the job: those in
the tree it recorded while the job was alive, and any other process in the ranks' sessions
(a DataLoader worker forked after the last look), and SIGKILLs what is left. `hangdoc run`
and the scenarios (tests, demo, bench) end their jobs with it.

A daemon the job starts (`fork(); setsid(); fork(); exec`) leaves both the tree and the sessions:
`hangdoc run` becomes a child subreaper first (`prctl(PR_SET_CHILD_SUBREAPER)`), so such orphans
are re-parented to it instead of to init, and are found as its children in a session not its own.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hangdoc.base.errors import STOP_SIGNALS
from hangdoc.base.redact import redact_cmdline


@dataclass
class RunningJob:
    popen: subprocess.Popen
    log_path: Path | None = None
    seen: set[int] = field(default_factory=set)
    # The processes behind `seen` (psutil checks their start time, so a pid the kernel has
    # reused since is never signalled) and the sessions they ran in (each rank's own).
    procs: dict[int, psutil.Process] = field(default_factory=dict, repr=False)
    sessions: set[int] = field(default_factory=set, repr=False)
    # With hangdoc a subreaper: its own children from before the job (None: orphans are not looked for)
    others: frozenset[int] | None = None
    unended: list[str] = field(default_factory=list)    # what stop_job could not end: "pid N: cmd (why)"

    @property
    def pid(self) -> int:
        return self.popen.pid

    def refresh_tree(self) -> set[int]:
        """Remember every descendant now alive, so `stop_job` can find orphans later."""
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return self.seen
        children += adopted(self)
        for proc in children:
            known = self.procs.get(proc.pid)
            if known is None or not known.is_running():
                self.procs[proc.pid] = proc
            try:
                self.sessions.add(os.getsid(proc.pid))
            except OSError:
                pass
        self.seen.update(p.pid for p in children)
        return self.seen

    def rank_pids(self) -> list[int]:
        try:
            return [p.pid for p in psutil.Process(self.pid).children()]
        except psutil.Error:
            return []


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the one orphans below it are re-parented to (Linux 3.4+): a job's
    double-forked daemons then stay findable. False where the call is not there."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def own_children() -> frozenset[int]:
    """This process's children now: what a job started later is not."""
    try:
        return frozenset(p.pid for p in psutil.Process().children())
    except psutil.Error:
        return frozenset()


def adopted(job: RunningJob) -> list[psutil.Process]:
    """Orphans of the job re-parented to hangdoc (a subreaper): its children, but the job's command
    and those it had before, in a session other than its own (py-spy runs in hangdoc's), with
    everything below them."""
    if job.others is None:
        return []
    try:
        children = psutil.Process().children()
        own = os.getsid(0)
    except (OSError, psutil.Error):
        return []
    found = []
    for proc in children:
        if proc.pid == job.pid or proc.pid in job.others:
            continue
        try:
            if os.getsid(proc.pid) != own:
                found += [proc, *proc.children(recursive=True)]
        except (OSError, psutil.Error):
            continue
    return found


def start_job(cmd: list[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None,
              log_path: str | Path | None = None) -> RunningJob:
    """Start `cmd` in a session of its own; its output goes to `log_path` (or is discarded)."""
    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env["PYTHONUNBUFFERED"] = "1"
    if env:
        full_env.update(env)
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL
    try:
        popen = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        if log_path:
            out.close()
    return RunningJob(popen, Path(log_path) if log_path else None)


def _job_processes(job: RunningJob) -> list[psutil.Process]:
    """Every live process we know is the job's: those seen, and any in the ranks' sessions."""
    found = {pid: proc for pid, proc in job.procs.items() if proc.is_running()}
    found.update((proc.pid, proc) for proc in adopted(job))
    sessions = (job.sessions | {job.pid}) - {os.getsid(0)}
    for proc in psutil.process_iter():
        try:
            if proc.pid not in found and os.getsid(proc.pid) in sessions:
                found[proc.pid] = proc
        except (OSError, psutil.Error):
            continue
    return [proc for proc in found.values() if _alive(proc)]


def outliving(job: RunningJob) -> list[tuple[int, tuple[str, ...]]]:
    """The job's processes still running once its command has ended: (pid, command line) each."""
    found = []
    for proc in _job_processes(job):
        if proc.pid == job.pid:
            continue
        try:
            found.append((proc.pid, tuple(proc.cmdline())))
        except psutil.Error:
            continue
    return sorted(found)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_job(job: RunningJob, grace: float = 3.0) -> None:
    """End the launcher, every rank and every worker it ever had; never anything else.

    A Ctrl-C or SIGTERM that comes meanwhile (a CI runner's timeout as `hangdoc run` ends a hung
    job) waits until the job is ended, then is raised again: cut short, this left a job whose ranks
    do not heed SIGTERM (blocked in a collective, their Python handler never runs) running."""
    with _signals_deferred():
        _stop(job, grace)


@contextmanager
def _signals_deferred():
    came: list[int] = []
    try:
        old = {number: signal.signal(number, lambda n, _frame: came.append(n))
               for number in STOP_SIGNALS}
    except ValueError:            # not the main thread: no handler of ours runs here
        old = {}
    try:
        yield
    finally:
        for number, handler in old.items():
            signal.signal(number, handler)
        if came:
            signal.raise_signal(came[-1])


def _stop(job: RunningJob, grace: float) -> None:
    job.refresh_tree()
    if job.popen.poll() is None:
        try:
            os.killpg(job.pid, signal.SIGTERM)      # torchrun forwards it to the ranks
        except ProcessLookupError:
            pass
        try:
            job.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    for _ in range(5):          # a rank may fork a worker while we kill: look again
        victims = _job_processes(job)
        if not victims:
            break
        for proc in victims:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(victims, timeout=grace)
    if job.popen.poll() is None:
        job.popen.kill()
    job.popen.wait(timeout=grace)
    job.unended = [f"pid {pid}: {' '.join(redact_cmdline(cmd)) or '?'} (could not be ended)" for pid, cmd in outliving(job)]


def end_outliving(job: RunningJob, grace: float = 3.0) -> tuple[str, ...]:
    """End what the job left running once its command ended (SIGTERM, then SIGKILL after `grace`):
    one line each, "pid N: CMD (ended by hangdoc)" or "(could not be ended: why)"."""
    job.refresh_tree()
    left = outliving(job)
    if not left:
        return ()
    procs = {proc.pid: proc for proc in _job_processes(job)}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [procs[pid] for pid, _ in left if pid in procs and _alive(procs[pid])]
        for proc in alive:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=grace)
    said = []
    for pid, cmd in left:
        why = "could not be ended: it still runs" if pid in procs and _alive(procs[pid]) else "ended by hangdoc"
        said.append(f"pid {pid}: {' '.join(redact_cmdline(cmd)) or '?'} ({why})")
    return tuple(said)
