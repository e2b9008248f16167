"""debugger-prompt: a rank sits at a pdb prompt (a breakpoint() left in) that nobody answers."""
from __future__ import annotations

from hangdoc.model import Cause, Finding, Severity, Wait
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import rank_line
from hangdoc.rules.samples import chain, latest_frames
from hangdoc.rules.waits import at, last_full, own_line, waiters, where

_STDIN = {
    "tty": "a terminal ({target}): the prompt waits there, but every rank shares it and its (Pdb) "
           "went to the job's output, where nobody answers it",
    "pipe": "a pipe ({target}), not a terminal: nothing typed reaches the prompt",
    "fifo": "a FIFO ({target}), not a terminal: nothing typed reaches the prompt",
    "socket": "a socket ({target}), not a terminal: nothing typed reaches the prompt",
}


def check(ctx: Context) -> list[Finding]:
    findings = []
    for waiter in waiters(ctx, Wait.DEBUGGER):
        line = own_line(ctx, waiter)
        evidence = [rank_line(ctx, waiter.view)] if waiter.is_rank else []
        evidence.append(f"{waiter.who} stack: {chain(latest_frames(ctx.bundle, waiter.pid), 8)}")
        evidence.append(f"pdb stopped at {at(line)}: the breakpoint() or pdb.set_trace() is that line "
                        f"or the one just before it")
        stdin = _stdin(ctx, waiter.pid)
        if stdin:
            evidence.append(f"{waiter.who}'s stdin (fd 0) is {stdin}")
        waiting = [v for v in ctx.diagnosis.waiting if waiter.rank not in v.ranks]
        if waiting:
            what = waiting[0].reading.detail or "a collective"
            evidence.append(f"{ctx.diagnosis.count(waiting)} other rank(s) wait for it in {what}")
        findings.append(finding(
            RULE, [waiter.rank],
            f"{waiter.subject} is stopped at a pdb prompt{where(line)} (a breakpoint() left in) that nobody answers",
            evidence, _fix(line),
        ))
    return findings


def _stdin(ctx: Context, pid: int) -> str | None:
    sample = last_full(ctx, pid, lambda proc: any(link.fd == 0 for link in proc.fd_links))
    if sample is None:
        return None
    link = next(link for link in sample.proc.fd_links if link.fd == 0)
    if link.target == "/dev/null":
        return ("/dev/null, as launchers leave it: pdb reads the sys.stdin the job set instead "
                "(on /dev/null it would have quit at once)")
    words = _STDIN.get(link.kind, "{target}, not a terminal: nothing typed reaches the prompt")
    return words.format(target=link.target)


def _fix(line) -> str:
    spot = f"the breakpoint at {line.short_filename}:{line.line}" if line else "the breakpoint()"
    return (f"Remove {spot}, or guard it so only an interactive run stops there "
            "(`if os.environ.get('RANK', '0') == '0' and sys.stdin.isatty(): breakpoint()`); "
            "launch with PYTHONBREAKPOINT=0 to turn every breakpoint() into a no-op. Under torchrun a "
            "rank's stdin is not a terminal anyone types at, so the prompt waits for ever while the other "
            "ranks wait for it in their collective.")


RULE = Rule(
    slug="debugger-prompt",
    title="A rank waits at a pdb prompt nobody answers",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang when a culprit rank's (or its worker's) main thread sits in pdb's command "
            "loop (cmd.py cmdloop under pdb.py interaction) reading stdin: a breakpoint() or "
            "pdb.set_trace() left in. Names the line pdb stopped at and what the rank's stdin is.",
    fix="Remove the breakpoint() / pdb.set_trace(), or guard it by rank and `sys.stdin.isatty()`; "
        "launch with PYTHONBREAKPOINT=0 to turn every breakpoint() into a no-op.",
    snippet="import os, sys\n"
            "if os.environ.get(\"RANK\", \"0\") == \"0\" and sys.stdin.isatty():\n"
            "    breakpoint()          # PYTHONBREAKPOINT=0 makes every breakpoint() a no-op\n",
    causes=frozenset({Cause.OWN_CODE}),
)
