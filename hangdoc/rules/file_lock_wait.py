"""file-lock-wait: a rank or its DataLoader worker sleeps on a file lock another process holds."""
from __future__ import annotations

from hangdoc.model import PID_STRIDE, Cause, FileLock, Finding, ProcessInfo, ProofKind, Role, Severity, Wait
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import rank_line
from hangdoc.rules.samples import chain, kernel_wait, latest_frames, samples_of
from hangdoc.rules.waits import Waiter, at, command, last_full, own_line, waiters, where

_NO_LOCKS = "locks: could not collect: "
_KINDS = {"FLOCK": "an flock", "POSIX": "a POSIX (fcntl/lockf)", "OFDLCK": "an open-file-description"}


def check(ctx: Context) -> list[Finding]:
    findings = []
    found = list(waiters(ctx, Wait.FILE_LOCK))
    # The analysis proved the waits a cycle (analyze/proofs.py): no holder will let go by itself.
    # /proc/locks names holders by their pid on the node, which a merge may have renumbered.
    proof = ctx.diagnosis.proof
    cycle = {w.pid % PID_STRIDE for w in found} if proof is not None and proof.kind == ProofKind.LOCK_CYCLE else set()
    for waiter in found:
        line = own_line(ctx, waiter)
        sample = last_full(ctx, waiter.pid, lambda proc: proc.in_file_lock)
        lock = sample.proc.locks[0] if sample is not None and sample.proc.locks else None
        evidence = [rank_line(ctx, waiter.view)]
        asleep = _asleep_for(ctx, waiter.pid)
        kernel = f" ({kernel_wait(ctx.bundle, sample)})" if sample is not None else ""
        evidence.append(f"{waiter.who} has slept on a file lock" + (f" for {asleep:.0f} s" if asleep is not None else "")
                        + f"{kernel} at {at(line)}")
        evidence.append(f"{waiter.who} stack: {chain(latest_frames(ctx.bundle, waiter.pid))}")
        evidence += _lock_lines(ctx, waiter, lock, sample)
        path = lock.path if lock is not None and lock.path else "a file"
        holder = (f", held by pid {lock.holder_pid} ({command(None, lock.holder_cmdline, 40)})"
                  if lock is not None and lock.holder_pid else "")
        findings.append(finding(
            RULE, [waiter.rank],
            f"{waiter.subject} waits{where(line)} for a lock on {path}{holder}",
            evidence, _fix(lock, lock is not None and lock.holder_pid in cycle),
        ))
    return findings


def _asleep_for(ctx: Context, pid: int) -> float | None:
    """How long the kernel has shown the process asleep on a file lock, read after read (None: it
    did not show it at the last full read)."""
    full = [(t, s) for t, s in samples_of(ctx.bundle, pid) if s.alive and s.proc is not None and s.proc.full]
    if not full or not full[-1][1].proc.in_file_lock:
        return None
    start = full[-1][0]
    for t, s in reversed(full):
        if not s.proc.in_file_lock:
            break
        start = t
    return full[-1][0] - start


def _lock_lines(ctx: Context, waiter: Waiter, lock: FileLock | None, sample) -> list[str]:
    if sample is None:
        return ["the kernel never showed the wait as a file lock (no wchan read), so /proc/locks was not "
                "consulted: the frame alone says flock/lockf"]
    if lock is None:
        why = next((e.removeprefix(_NO_LOCKS) for e in sample.errors if e.startswith(_NO_LOCKS)), None)
        return [f"/proc/locks could not name the holder: {why}" if why else
                "/proc/locks showed no lock this process waits for (a lock in another namespace, or "
                "the wait ended between the kernel's two answers)"]
    kind = _KINDS.get(lock.kind, f"a {lock.kind}")
    path = lock.path or f"inode {lock.inode}"
    lines = [f"/proc/locks: {waiter.who} waits for {kind} {lock.mode} lock on {path} (inode {lock.inode})"]
    if lock.holder_pid is None:
        lines.append("/proc/locks names no holding process (an open-file-description lock, or a holder in "
                     "another pid namespace)")
        return lines
    holder = ctx.bundle.job.info(lock.holder_pid)
    place = f" ({_place(holder)})" if holder is not None else " (not a process of this job)"
    lines.append(f"the lock is held by pid {lock.holder_pid}{place}: {command(holder, lock.holder_cmdline)}")
    return lines


def _place(proc: ProcessInfo) -> str:
    """Where a process of the job stands in it, in words."""
    if proc.role is Role.LAUNCHER:
        return "the job's launcher"
    if proc.role is Role.RANK:
        return f"rank {proc.rank} of this job"
    what = "a DataLoader worker" if proc.role is Role.WORKER else "a child process"
    return f"{what} of rank {proc.rank}" if proc.rank is not None else f"{what} of this job"


def _fix(lock: FileLock | None, in_cycle: bool = False) -> str:
    if lock is not None and in_cycle:
        first = (f"pid {lock.holder_pid} waits in turn for a lock this process holds (the cycle the Proof line "
                 "names), so neither lets go: take the lock files in one order everywhere (sorted by path), or "
                 "one lock around both, and end one of the two to free the job now.")
    elif lock is not None and lock.holder_pid:
        holder = f"pid {lock.holder_pid} ({command(None, lock.holder_cmdline, 50)})"
        first = (f"Find out why {holder} keeps {lock.path or 'the file'} locked and let it finish or end it; "
                 "delete a stale lock file only once no process holds it.")
    else:
        first = "Find the process that holds the lock (`cat /proc/locks`, `lsof FILE`) and let it finish or end it."
    return (first + " Take file locks with a deadline so a held lock raises instead of hanging the rank: "
            "fcntl.flock(fd, LOCK_EX | LOCK_NB) in a retry loop with a timeout, or filelock.FileLock(path, "
            "timeout=60).")


RULE = Rule(
    slug="file-lock-wait",
    title="A rank or its DataLoader worker waits for a file lock another process holds",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang when a culprit rank's main thread, or one of its DataLoader workers, sleeps on "
            "a file lock (wchan locks_lock_inode_wait / fcntl_setlk, or flock/lockf frames with --native). "
            "Names the locked path, the holder's pid and command line from /proc/locks, and the job's line "
            "that asked for the lock. Where the analysis proved the waits a cycle (the holder waits for a lock "
            "the waiter holds: proof lock-cycle), the fix is one lock order.",
    fix="Find and end (or fix) the process that holds the lock; remove stale lock files only when no process "
        "holds them; take locks with a timeout (LOCK_NB in a retry loop, filelock.FileLock(path, timeout=...)).",
    snippet="import fcntl, time\n\n"
            "def lock_with_deadline(fd, seconds=60):\n"
            "    deadline = time.monotonic() + seconds\n"
            "    while True:\n"
            "        try:\n"
            "            return fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "        except BlockingIOError:\n"
            "            if time.monotonic() > deadline:\n"
            "                raise TimeoutError(f\"lock on fd {fd} still held after {seconds} s\")\n"
            "            time.sleep(0.2)\n",
    causes=frozenset({Cause.OWN_CODE, Cause.WORKERS}),
)
