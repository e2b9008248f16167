"""child-process-wait: a rank waits for a child process (subprocess.run, Popen.wait) that never ends."""
from __future__ import annotations

from hangdoc.model import Cause, Finding, ProcessInfo, Role, Severity, Wait
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import rank_line
from hangdoc.rules.samples import chain, cpu_use, kernel_wait, latest_frames
from hangdoc.rules.waits import command, holds_own_pipe, kernel_words, last_full, own_line, pipe_line, waiters, where

# Children a Python process starts for itself, never the one its code waits for.
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "multiprocessing.semaphore_tracker")
_ADVICE = {
    "FIFO": "here it waits for a process to open the FIFO's other end: start the writer before the reader, "
            "or have the child open it with O_NONBLOCK",
    "nobody writes": "here it reads input nobody sends: pass input=... or stdin=subprocess.DEVNULL",
    "nobody reads": "here it writes output nobody reads: use capture_output=True (run() reads it) or send it "
                    "to a file",
    "terminal": "here it waits for someone to type: pass the answer, or stdin=subprocess.DEVNULL and the "
                "tool's non-interactive flag",
    "socket": "here it waits on the network: give the tool a timeout of its own",
    "file lock": "here it waits for a file lock another process holds",
}
DEPTH = 3     # a shell's child's child: where `sh -c "cat fifo"` really sits


def check(ctx: Context) -> list[Finding]:
    findings = []
    for waiter in waiters(ctx, Wait.CHILD):
        line = own_line(ctx, waiter)
        evidence = [rank_line(ctx, waiter.view)]
        evidence.append(f"{waiter.who} stack: {chain(latest_frames(ctx.bundle, waiter.pid))}")
        chain_of = _blocked_chain(ctx, waiter.pid)
        for child in chain_of:
            evidence += _child_lines(ctx, child)
        if not chain_of:
            evidence.append(f"no child of {waiter.who} was seen alive (started outside the job's process "
                            "tree, or it ended between two samples)")
        last = chain_of[-1] if chain_of else None
        words = kernel_words(_proc(ctx, last)) if last is not None else None
        child = f" for its child pid {last.node_pid} ({command(last, width=50)})" if last is not None else \
            " for a child process"
        title = f"{waiter.subject} waits{where(line)}{child}" + (f", {_short(words)}" if words else "")
        held = last is not None and holds_own_pipe(ctx, last.pid, waiter.pid)
        findings.append(finding(RULE, [waiter.rank], title, evidence, _fix(last, words, waiter.who if held else None)))
    return findings


def _children(ctx: Context, pid: int) -> list[ProcessInfo]:
    last = ctx.bundle.last
    found = []
    for proc in ctx.bundle.job.processes:
        sample = last.sample_of(proc.pid)
        if (proc.ppid == pid and proc.role is Role.CHILD and sample is not None and sample.alive
                and not any(h in " ".join(proc.cmdline) for h in _HELPERS)):
            found.append(proc)
    return sorted(found, key=lambda p: -p.start_time)


def _blocked_chain(ctx: Context, pid: int) -> list[ProcessInfo]:
    """The newest child, and while it waits for a child of its own, that one (up to DEPTH)."""
    chain_of: list[ProcessInfo] = []
    for _ in range(DEPTH):
        kids = _children(ctx, pid)
        if not kids:
            break
        chain_of.append(kids[0])
        proc = _proc(ctx, kids[0])
        if proc is None or proc.wchan not in ("do_wait", "kernel_wait4"):
            break
        pid = kids[0].pid
    return chain_of


def _proc(ctx: Context, info: ProcessInfo | None):
    sample = last_full(ctx, info.pid) if info is not None else None
    return sample.proc if sample is not None else None


def _child_lines(ctx: Context, child: ProcessInfo) -> list[str]:
    name = f"child pid {child.node_pid}"
    age = ctx.diagnosis.decided_at - child.start_time
    lines = [f"{name} (started {age:.0f} s before the verdict): {command(child)}"]
    sample = last_full(ctx, child.pid)
    if sample is None:
        return lines
    words = kernel_words(sample.proc)
    lines.append(f"{name} kernel: {kernel_wait(ctx.bundle, sample)}" + (f": {words}" if words else ""))
    links = ", ".join(f"fd {link.fd} {link.target}" + (" (a FIFO)" if link.kind == "fifo" else "")
                      for link in sample.proc.fd_links[:6])
    files = ", ".join(f"fd {f.fd} {f.path}" for f in sample.proc.open_files[:4])
    if links or files:
        lines.append(f"{name} holds open: " + ", ".join(x for x in (links, files) if x))
    pipe = pipe_line(ctx, child.pid, name)
    if pipe is not None:
        lines.append(pipe)
    used = cpu_use(ctx.bundle, child.pid)
    if used is not None:
        lines.append(f"{name} used {used[0]:.2f} s of CPU in {used[1]:.0f} s")
    return lines


def _short(words: str) -> str:
    return "which is " + words.split(":", 1)[0]


def _fix(child: ProcessInfo | None, words: str | None, holder: str | None = None) -> str:
    """`holder`: the waiter, where it holds the only write end of the pipe the child reads."""
    advice = next((text for key, text in _ADVICE.items() if words and key in words), None)
    if holder is not None:
        advice = (f"here {holder} holds the only write end of the pipe the child reads, and waits for it: close "
                  "it before waiting (p.stdin.close() before p.wait()), or pass the input with p.communicate(input)")
    who = f"the child ({command(child, width=50)})" if child is not None else "the child"
    tail = (f" {advice[0].upper()}{advice[1:]}." if advice else
            f" Look at what {who} does: `py-spy dump --pid PID` if it is Python, `strace -p PID` otherwise.")
    return ("Give the call a timeout: subprocess.run(cmd, timeout=60) kills the child and raises "
            "TimeoutExpired instead of hanging the rank (Popen.wait(timeout=...), communicate(timeout=...) "
            f"likewise), and make sure what {who} waits for comes." + tail)


RULE = Rule(
    slug="child-process-wait",
    title="A rank waits for a child process that never ends",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang when a culprit rank's main thread (or its worker's) waits for a child process: "
            "subprocess.run / call / check_output, Popen.wait or communicate on its stack, or the kernel's "
            "wait4 (os.system, os.waitpid). Names the child's pid and command line, what the kernel says it "
            "is blocked in (a FIFO nobody opens, a pipe nobody writes, a terminal prompt) and what it holds open.",
    fix="Give subprocess.run (Popen.wait, communicate) a timeout, and make sure what the child waits for "
        "comes: the FIFO's writer, its input, a reader of its output.",
    snippet="import subprocess\n\n"
            "try:\n"
            "    subprocess.run(cmd, timeout=60, check=True, stdin=subprocess.DEVNULL)\n"
            "except subprocess.TimeoutExpired:\n"
            "    raise RuntimeError(f\"{cmd[0]} did not finish in 60 s\") from None\n",
    causes=frozenset({Cause.OWN_CODE}),
)
