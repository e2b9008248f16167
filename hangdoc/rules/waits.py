"""What the rules about a job's own waits share: debugger-prompt, file-lock-wait, child-process-wait,
helper-thread-died (and dataloader-stall, for a pipe a worker reads). Each reads a culprit's Reading
(its detail is a `Wait`, analyze/classify.py), the thread's own line, and the kernel's view of the
process it waits for. Pure: the bundle only.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from hangdoc.analyze.classify import Reading
from hangdoc.analyze.diagnose import RankView
from hangdoc.model import FILE_LOCK_WCHANS, Frame, PipeRead, ProcSample, ProcStat, ProcessInfo, Verdict, Wait
from hangdoc.model.stack import own_frame
from hangdoc.rules.base import Context
from hangdoc.rules.evidence import worker_name
from hangdoc.rules.samples import latest_frames, samples_of

# What a process's kernel wait (wchan, then state) means, in words, first match wins.
_KERNEL_WORDS = (
    (("wait_for_partner", "fifo_open"), "blocked opening a FIFO: no process has opened its other end"),
    (("pipe_read", "pipe_wait", "anon_pipe_read"), "reading a pipe or FIFO that nobody writes to"),
    (("pipe_write", "anon_pipe_write"), "writing to a pipe that nobody reads (it is full)"),
    (("do_wait", "kernel_wait4"), "waiting for a child process of its own"),
    (("n_tty_read",), "reading a terminal: it waits for someone to type"),
    (("unix_stream", "sk_wait_data", "inet_csk_accept", "tcp_recvmsg", "sk_stream_wait"), "waiting on a socket"),
    (tuple(FILE_LOCK_WCHANS), "waiting for a file lock"),
    (("futex",), "asleep on a futex (a lock or a condition)"),
    (("do_sys_poll", "do_select", "ep_poll", "core_sys_select"), "waiting in poll/select"),
    (("nanosleep",), "sleeping"),
)


@dataclass(frozen=True)
class Waiter:
    """A culprit rank's main thread, or one of its workers, caught in one kind of wait."""

    view: RankView
    pid: int
    who: str                       # "rank 1 (pid 4242)" or "worker 0 (pid 4250)"
    reading: Reading

    @property
    def rank(self) -> int | None:
        return self.view.info.rank

    @property
    def is_rank(self) -> bool:
        return self.pid == self.view.info.pid

    @property
    def subject(self) -> str:
        """"Rank 1" or "Rank 1's DataLoader worker 0", to open a finding's title."""
        if self.is_rank:
            return f"Rank {self.rank}"
        return f"Rank {self.rank}'s DataLoader {self.who.split(' (')[0]}"


def waiters(ctx: Context, wait: Wait) -> Iterator[Waiter]:
    """The culprits of a hang (and their live workers) whose reading says they wait on `wait`."""
    d = ctx.diagnosis
    if d.verdict != Verdict.HANG:
        return
    for view in ctx.culprit_views():
        if view.reading.detail == wait:
            yield Waiter(view, view.info.pid, f"rank {view.info.rank} (pid {view.info.node_pid})", view.reading)
        for worker, reading, alive in view.workers:
            if alive and reading.detail == wait:
                yield Waiter(view, worker.pid, worker_name(worker), reading)


def own_line(ctx: Context, waiter: Waiter) -> Frame | None:
    """The job's own innermost line on the waiting thread (None: no frame of the job's code)."""
    return own_frame(latest_frames(ctx.bundle, waiter.pid)) or waiter.reading.frame


def at(frame: Frame | None) -> str:
    return frame.label if frame is not None else "a line hangdoc could not read (no stack)"


def where(frame: Frame | None) -> str:
    """" at train.py:57" (the file as py-spy shortens it), for a title; "" without a frame."""
    return f" at {frame.short_filename}:{frame.line}" if frame is not None else ""


def last_full(ctx: Context, pid: int, want=lambda proc: True) -> ProcSample | None:
    """The newest sample of `pid` with a full /proc read (wchan, files) that `want` accepts."""
    for _, sample in reversed(samples_of(ctx.bundle, pid)):
        if sample.alive and sample.proc is not None and sample.proc.full and want(sample.proc):
            return sample
    return None


def kernel_words(proc: ProcStat | None) -> str | None:
    """What the kernel says a process waits on, in words (None: nothing it names)."""
    if proc is None:
        return None
    if proc.state == "T" or proc.state == "t":
        return "stopped (SIGSTOP, or held by a debugger)"
    wchan = proc.wchan or ""
    for keys, words in _KERNEL_WORDS:
        if wchan and any(key in wchan for key in keys):
            return words
    if proc.state == "D":
        return "in uninterruptible sleep (a disk or a network file system)"
    return None


def command(info: ProcessInfo | None, cmdline: tuple[str, ...] = (), width: int = 160) -> str:
    """A command line on one line (a `python -c` program's newlines folded), cut at `width`; under
    60 characters wide, for a title, paths are named by their base names."""
    words = list(cmdline or (info.cmdline if info is not None else ()))
    if width < 60:
        words = [w.rsplit("/", 1)[-1] if w.startswith("/") else w for w in words]
    text = " ".join(" ".join(words).split()) or "?"
    return text if len(text) <= width else text[:width - 3] + "..."


def pipe_read(ctx: Context, pid: int) -> PipeRead | None:
    """The pipe `pid` sleeps reading at its last full read, with its writers read; None: none."""
    sample = last_full(ctx, pid)
    read = sample.proc.pipe_read if sample is not None and sample.proc.in_pipe_read else None
    return read if read is not None and read.writers is not None else None


def pipe_line(ctx: Context, pid: int, name: str) -> str | None:
    """"worker 0 (pid 21) reads pipe:[88123] (its fd 5), whose write end is held by itself (fd 6)":
    who holds the write end of the pipe it sleeps reading, as its last full read saw."""
    read = pipe_read(ctx, pid)
    if read is None:
        return None
    info = ctx.bundle.job.info(pid)
    holders = []
    for end in read.writers:
        holder = ctx.bundle.job.info(pid - info.node_pid + end.pid) if info is not None else None
        if holder is not None and holder.pid == pid:
            holders.append(f"itself (fd {end.fd})")
        elif holder is not None and holder.rank is not None and holder.pid == holder.rank_pid:
            holders.append(f"rank {holder.rank} (pid {end.pid}, fd {end.fd})")
        elif holder is not None:
            holders.append(f"its job's {holder.role.value} pid {end.pid} (fd {end.fd})")
        else:
            holders.append(f"pid {end.pid} (fd {end.fd}), not a process of the job")
    return f"{name} reads {read.target} (its fd {read.fd}), whose write end is held by {', '.join(holders)}"


def holds_own_pipe(ctx: Context, pid: int, holder: int) -> bool:
    """The pipe `pid` sleeps reading is written only through `holder`'s descriptors (pids of the job)."""
    read = pipe_read(ctx, pid)
    info = ctx.bundle.job.info(pid)
    return read is not None and info is not None and bool(read.writers) and all(
        pid - info.node_pid + end.pid == holder for end in read.writers)


def pipe_self_fix(name: str) -> str:
    """How a process that holds the write end of the pipe it reads gets to see its end."""
    return (f"{name[0].upper()}{name[1:]} holds the write end of the pipe it reads, so its read never sees the end "
            "of the pipe: close its copy of the write end once the writer is started (os.close(w) after "
            "os.fork(); subprocess.Popen closes its own), or read a length the writer sends first.")
