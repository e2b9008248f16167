"""helper-thread-died: a rank waits on a queue or event that a thread of its own fed, and that
thread is gone (it died, most often with an exception nobody saw)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from hangdoc.model import Cause, Finding, LogTail, Severity, Thread, Wait
from hangdoc.model.logline import line_rank, strip_rank
from hangdoc.model.stack import own_frame
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import rank_line
from hangdoc.rules.logs import traceback_frames
from hangdoc.rules.samples import chain, latest_frames, samples_of
from hangdoc.rules.waits import Waiter, at, own_line, waiters, where

# threading's excepthook: "Exception in thread prefetch:" (3.10+: "Thread-1 (target)"), then a traceback.
_DIED = re.compile(r"Exception in thread (.+):\s*$")


@dataclass(frozen=True)
class Gone:
    """A thread of the rank's own code seen in an earlier stack and in none since."""

    name: str
    tid: int | None
    last_seen: float | None
    frames: tuple = ()
    exception: str | None = None          # "RuntimeError: shard 7 is corrupt", from the log
    traceback: tuple[str, ...] = ()


def check(ctx: Context) -> list[Finding]:
    findings = []
    for waiter in waiters(ctx, Wait.THREAD):
        if not waiter.is_rank:
            continue
        gone = _gone_threads(ctx, waiter)
        if not gone:
            continue
        line = own_line(ctx, waiter)
        evidence = [rank_line(ctx, waiter.view),
                    f"{waiter.who} stack: {chain(latest_frames(ctx.bundle, waiter.pid))}"]
        for thread in gone[:3]:
            evidence += _thread_lines(ctx, waiter, thread)
        first = gone[0]
        died = f" (it died with {first.exception})" if first.exception else ""
        findings.append(finding(
            RULE, [waiter.rank],
            f"{waiter.subject} waits{where(line)} for its thread {first.name!r}, which is gone{died}",
            evidence, RULE.fix,
        ))
    return findings


def _gone_threads(ctx: Context, waiter: Waiter) -> list[Gone]:
    """Threads of the job's own code seen in an earlier stack of the rank and absent from its last,
    with what the log says of their death; and threads the log says died that its last stack lacks."""
    stacks = [(t, s.stack) for t, s in samples_of(ctx.bundle, waiter.pid) if s.alive and s.stack is not None]
    if not stacks:
        return []
    now = stacks[-1][1].threads
    alive_tids, alive_names = {t.tid for t in now}, {t.name for t in now}
    seen: dict[int, tuple[float, Thread]] = {}
    for time, stack in stacks[:-1]:
        for thread in stack.threads:
            if not thread.is_main and thread.tid not in alive_tids and own_frame(thread.frames) is not None:
                seen[thread.tid] = (time, thread)
    deaths = _log_deaths(ctx, waiter)
    gone = []
    for tid, (time, thread) in sorted(seen.items(), key=lambda item: -item[1][0]):
        exception, lines = deaths.pop(thread.name, (None, ()))
        gone.append(Gone(thread.name, tid, time, thread.frames, exception, lines))
    for name, (exception, lines) in deaths.items():
        if name not in alive_names:
            gone.append(Gone(name, None, None, (), exception, lines))
    return gone


def _log_deaths(ctx: Context, waiter: Waiter) -> dict[str, tuple[str | None, tuple[str, ...]]]:
    """thread name -> (the exception line, its traceback's frames) for every "Exception in thread"
    the log holds of this rank (unprefixed lines count when the rank is the only culprit)."""
    alone = len(ctx.diagnosis.culprits) == 1
    deaths: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    for tail in ctx.bundle.logs:
        for i, raw in enumerate(tail.lines):
            m = _DIED.search(strip_rank(raw))
            if m is None:
                continue
            rank = line_rank(raw)
            if rank != waiter.rank and not (rank is None and alone):
                continue
            deaths[m.group(1)] = _exception_after(tail, i)
    return deaths


def _exception_after(tail: LogTail, start: int) -> tuple[str | None, tuple[str, ...]]:
    """The exception line that ends the traceback after `start`, and the traceback's last frames."""
    for j in range(start + 1, min(len(tail.lines), start + 200)):
        text = strip_rank(tail.lines[j])
        if text and not text[0].isspace() and not text.startswith("Traceback"):
            return text.strip()[:200], tuple(traceback_frames(tail.lines, j, limit=3))
    return None, ()


def _thread_lines(ctx: Context, waiter: Waiter, thread: Gone) -> list[str]:
    name = f"thread {thread.name!r}" + (f" (tid {thread.tid})" if thread.tid else "")
    lines = []
    if thread.last_seen is not None:
        since = ctx.diagnosis.decided_at - thread.last_seen
        where = own_frame(thread.frames)
        lines.append(f"{name} was last seen {since:.0f} s before the verdict at {at(where)}, "
                     f"and in none of {waiter.who}'s stacks since")
    else:
        lines.append(f"{name} is not among {waiter.who}'s threads, and the log says it died")
    if thread.exception:
        lines.append(f"the log: Exception in thread {thread.name}: {thread.exception}")
        lines += [f"  raised in {frame}" for frame in thread.traceback]
    elif thread.last_seen is not None:
        lines.append("the log holds no traceback of it (it ended, or its output went elsewhere)")
    return lines


RULE = Rule(
    slug="helper-thread-died",
    title="A rank waits on a queue or event fed by a thread of its own that is gone",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang when a culprit rank's main thread waits in queue.Queue.get, Event.wait or "
            "Condition.wait called from its own code, and a thread running the job's code was seen in an "
            "earlier stack of that rank and in none since, or the log says it died (\"Exception in thread "
            "NAME\") and the rank has no thread of that name. Names the line that waits, the thread, where "
            "it was last seen and the exception it died with.",
    fix="A thread that dies leaves its queue empty for ever: catch the exception in the thread and hand it to "
        "the consumer (put it on the queue and raise it there), or run the work with "
        "concurrent.futures (future.result() re-raises it); wait with a timeout and check the thread "
        "(q.get(timeout=60), then thread.is_alive()).",
    snippet="def prefetch(q):\n"
            "    try:\n"
            "        for batch in load():\n"
            "            q.put(batch)\n"
            "    except BaseException as exc:   # the consumer raises it instead of waiting for ever\n"
            "        q.put(exc)\n\n"
            "item = q.get(timeout=60)\n"
            "if isinstance(item, BaseException):\n"
            "    raise item\n",
    causes=frozenset({Cause.OWN_CODE}),
)
