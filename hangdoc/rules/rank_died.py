"""rank-died: a rank died by a signal or a non-zero exit code: how, its own last words, where it was."""
from __future__ import annotations

import signal as signals
from dataclasses import dataclass

from hangdoc.analyze.departures import Departure
from hangdoc.base.words import mb, rank_set
from hangdoc.model import Bundle, Finding, ProcessExit, Severity, Verdict
from hangdoc.model.logline import line_rank, strip_rank
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.samples import samples_of

_NATIVE = ("terminate called after throwing", "what():", "Fatal Python error", "Segmentation fault", "Bus error",
           "Is there a distributed collective mismatch", "Aborted (core dumped)", "double free", "corrupted size")
_GLOO_MISMATCH = "Is there a distributed collective mismatch"
_TEARDOWN = (signals.SIGTERM, signals.SIGKILL)


@dataclass(frozen=True)
class Death:
    """How one rank died, from its exit record or torchrun's Root Cause block."""

    rank: int
    pid: int | None                # on its own node
    code: int | None
    signal: int | None
    core_dumped: bool
    told_by: str                   # where hangdoc read it
    record: ProcessExit | None     # the exit record, when the watch read one

    @property
    def told(self) -> bool:
        return self.code is not None or self.signal is not None

    @property
    def how(self) -> str:
        if self.signal is not None:
            return f"was killed by {signal_name(self.signal)}" + (" (core dumped)" if self.core_dumped else "")
        if self.code is not None:
            return f"exited with code {self.code}"
        return "vanished; its exit status could not be read"


def signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def death_of(ctx: Context, rank: int) -> Death | None:
    """How `rank` died: its exit record when the watch read one, else torchrun's Root Cause block."""
    bundle = ctx.bundle
    infos = [p for p in bundle.job.ranks if p.rank == rank]
    records = [(p, r) for p in infos if (r := bundle.exit_of(p.pid)) is not None]
    told = [(p, r) for p, r in records if r.told]
    if told:
        info, record = told[-1]
        told_by = f"read from /proc/{info.node_pid}/stat as it died" if record.source == "zombie" else "its exit record"
        return Death(rank, info.node_pid, record.code, record.signal, record.core_dumped, told_by, record)
    root = ctx.worked.root_cause
    if root is not None and root.rank == rank and root.exitcode is not None:
        code, sig = (None, -root.exitcode) if root.exitcode < 0 else (root.exitcode, None)
        pid = root.pid if root.pid is not None else (infos[-1].node_pid if infos else None)
        return Death(rank, pid, code, sig, False,
                     f"torchrun's Root Cause (first observed failure): exitcode {root.exitcode}",
                     records[-1][1] if records else None)
    if records:
        info, record = records[-1]
        return Death(rank, info.node_pid, None, None, False, "the watch found it gone", record)
    return None


def check(ctx: Context) -> list[Finding]:
    d = ctx.diagnosis
    if d.verdict != Verdict.CRASH:
        return []
    explained = {r for f in ctx.findings if f.severity is Severity.CRITICAL for r in f.ranks}
    findings = []
    left = ctx.worked.departure
    if left is not None and not left.own_error and left.rank in d.culprits and left.rank not in explained:
        return [_left_first(ctx, left)]
    for rank in d.culprits:
        death = None if rank in explained else death_of(ctx, rank)
        if death is not None:
            findings.append(_finding(ctx, death))
    return findings


def _finding(ctx: Context, death: Death) -> Finding:
    bundle = ctx.bundle
    pid = f" (pid {death.pid})" if death.pid is not None else ""
    oom = death.record is not None and death.record.oom_killed
    title = f"Rank {death.rank}{pid} {death.how}" + (" after the kernel's OOM killer struck" if oom else "")
    evidence = [_how_line(bundle, death)]
    evidence += _after_lines(bundle, death)
    native = _native_lines(bundle, death)
    evidence += native
    # A Python exception is quoted once, at the top of the report (analyze/facts.py: crash_story).
    raised = ctx.worked.exception_of(death.rank) if death.code not in (None, 0) else None
    evidence += _where_lines(ctx, death)
    growth = _growth(bundle, death)
    if death.signal == signals.SIGKILL or (death.record is not None and not death.told):
        evidence += _memory_lines(bundle, death)
    if death.record is not None and not death.told:
        evidence += [e.removeprefix("exit status: ") for e in death.record.errors]
    mismatch = any(_GLOO_MISMATCH in line for line in native)
    return finding(RULE, [death.rank], title, evidence, f"{RULE.fix} {_advice(death, oom, mismatch, raised, growth)}",
                   max_evidence=16)


def _left_first(ctx: Context, left: Departure) -> Finding:
    """The rank that left while the others were still in the job: the failures after it are its doing."""
    start = ctx.bundle.samples[0].time
    title = f"Rank {left.rank} (pid {left.pid}) left first: it {left.how}" + _doing_title(left)
    evidence = [f"rank {left.rank} {left.how} at +{left.time - start:.1f} s, before any other rank failed"]
    for error in left.named_by:
        evidence.append(f"rank {error.rank} then failed: {error.line}, rank {left.rank}'s own end of their "
                        f"connection (its socket, read from /proc): a consequence")
    named = {e.rank for e in left.named_by}
    for rank in left.consequences:
        if rank not in named:
            evidence.append(f"rank {rank} failed after it: a consequence")
    death = death_of(ctx, left.rank)
    if death is not None and left.code is None:
        evidence.append(f"rank {left.rank} then {death.how} ({death.told_by})")
    evidence += _where_lines(ctx, death) if death is not None else []
    if death is not None and left.code is None and death.told and (death.signal is not None or death.code != 0):
        # It closed its connections as it failed: a crash whose words hangdoc could not read, not a
        # rank that ran out of collectives.
        fix = (f"{RULE.fix} Here: rank {left.rank} closed its connections and then {death.how}: it failed, "
               "and none of what hangdoc read of its output says why; the errors the others printed are the "
               f"consequence. Read its own output (its `[rank{left.rank}]:` lines; under torchrun, `--log-dir "
               "DIR --tee 3` keeps each rank's).")
    else:
        fix = (f"{RULE.fix} Here: rank {left.rank} ran fewer collectives than the others and left (or tore its "
               "process group down) while they waited in one; the errors the others printed are the consequence. "
               "Every rank must call the same collectives in the same order: look for a collective under a "
               "condition on the rank (`if rank != ...: dist.barrier()`), a loop with fewer steps on one rank "
               "(uneven data), or an early return; TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective across "
               "ranks.")
    return finding(RULE, [left.rank], title, evidence, fix, max_evidence=16)


def _doing_title(left: Departure) -> str:
    calls = sorted({call for _, call in left.others_in})
    if not calls:
        return " while the others were still in the job"
    ranks = rank_set(r for r, _ in left.others_in)
    return f" while {ranks} {'was' if len(left.others_in) == 1 else 'were'} in {' / '.join(calls)}"


def _how_line(bundle: Bundle, death: Death) -> str:
    when = ""
    if death.record is not None and bundle.samples and (death.record.told or not death.told):
        when = f" at +{death.record.time - bundle.samples[0].time:.1f} s"
    return f"rank {death.rank} {death.how}{when} ({death.told_by})"


def _after_lines(bundle: Bundle, death: Death) -> list[str]:
    """The ranks that died after it: torchrun ending the job, or peers that lost it."""
    if death.record is None or not death.record.told:
        return []
    lines = []
    for info in bundle.job.ranks:
        record = bundle.exit_of(info.pid)
        if info.rank == death.rank or record is None or not record.told or record.time < death.record.time:
            continue
        later = record.time - death.record.time
        how = Death(info.rank, info.node_pid, record.code, record.signal, record.core_dumped, "", record).how
        why = " (the launcher ending the job)" if record.signal in _TEARDOWN else ""
        lines.append(f"then rank {info.rank} (pid {info.node_pid}) {how} {later:.2f} s later{why}: not a cause")
    return lines[:4]


def _native_lines(bundle: Bundle, death: Death, limit: int = 4) -> list[str]:
    """The native crash lines the job printed (std::terminate, gloo's enforce, a segfault): the
    rank's own (`[rankN]:`), or, for a rank killed by a signal of its own making, those without
    a rank prefix (C++ writes to stderr without torchrun's prefix)."""
    if death.signal is None or death.signal in _TEARDOWN:
        return []
    found = []
    for line in (line for tail in bundle.logs for line in tail.lines):
        owner = line_rank(line)
        text = strip_rank(line).strip()
        if (owner == death.rank or owner is None) and any(marker in text for marker in _NATIVE):
            found.append(text[:400])
    return list(dict.fromkeys(found))[-limit:]


def _where_lines(ctx: Context, death: Death) -> list[str]:
    """Where the rank last stood in its own code, and (for a collective mismatch) where the others did."""
    lines = []
    start = ctx.bundle.samples[0].time
    for info in ctx.bundle.job.ranks:
        seen = _last_own_frame(ctx.bundle, info.pid)
        if seen is None:
            continue
        when, frames, own = seen
        inside = f", inside {frames[0].label}" if frames[0] is not own else ""
        spot = f"'s last stack (+{when - start:.1f} s): {own.short_filename}:{own.line} in {own.name}{inside}"
        if info.rank == death.rank:
            lines.insert(0, f"rank {death.rank}{spot}")
        elif death.signal == signals.SIGABRT:
            lines.append(f"rank {info.rank}{spot}")
    return lines[:4]


def _last_own_frame(bundle: Bundle, pid: int):
    """(time, frames, innermost job frame) of the newest sample whose stack reaches the job's own code."""
    for when, sample in reversed(samples_of(bundle, pid)):
        frames = sample.stack.main.frames if sample.stack and sample.stack.main else ()
        own = next((f for f in frames if f.is_job_code), None)
        if own is not None:
            return when, frames, own
    return None


def _rss_seen(bundle: Bundle, death: Death) -> list[int]:
    info = next((p for p in reversed(bundle.job.ranks) if p.rank == death.rank), None)
    return [s.proc.rss_bytes for _, s in samples_of(bundle, info.pid) if s.proc and s.alive] if info else []


def _peer_rss(bundle: Bundle, death: Death) -> int | None:
    """The most resident memory any other rank held in any sample."""
    return max((s.proc.rss_bytes for p in bundle.job.ranks if p.rank != death.rank
                for _, s in samples_of(bundle, p.pid) if s.proc), default=None)


def _growth(bundle: Bundle, death: Death) -> tuple[int, int] | None:
    """(the others' most, its last) resident memory when it held a quarter more than any other rank
    (a rank's own first sample may be its start-up, so the peers are the yardstick)."""
    seen = _rss_seen(bundle, death)
    last = death.record.last_rss_bytes if death.record and death.record.last_rss_bytes else (seen[-1] if seen else 0)
    peers = _peer_rss(bundle, death)
    return (peers, last) if peers and last >= 1.25 * peers else None


def _memory_lines(bundle: Bundle, death: Death) -> list[str]:
    lines = []
    record = death.record
    seen = _rss_seen(bundle, death)
    last = record.last_rss_bytes if record and record.last_rss_bytes is not None else (seen[-1] if seen else None)
    peak = max([p for p in (record.peak_rss_bytes if record else None, *seen) if p is not None], default=None)
    if last is not None:
        grew = f", up from {mb(seen[0])} at the first sample" if len(seen) > 1 and seen[0] < last else ""
        lines.append(f"rank {death.rank}'s resident memory: {mb(last)} at the last sample before it died"
                     f" (peak {mb(peak or last)}){grew}")
        peers = _peer_rss(bundle, death)
        if peers:
            lines.append(f"the other ranks held up to {mb(peers)} each")
    for count in record.oom if record else ():
        if count.rose:
            lines.append(f"the OOM killer struck: oom_kill in {count.source} went {count.before} -> {count.after} "
                         f"while rank {death.rank} ran")
        elif count.before is not None and count.after is not None:
            lines.append(f"oom_kill in {count.source} stayed at {count.after}: not the OOM killer there")
    return lines


def _advice(death: Death, oom: bool, mismatch: bool, raised, growth: tuple[int, int] | None) -> str:
    """The fix for the way it died."""
    sig = death.signal
    if sig == signals.SIGKILL:
        if oom:
            return ("Here: out of memory. Lower the batch size (or sequence length), use fewer DataLoader workers "
                    "or a smaller prefetch_factor, or give the job more memory (the cgroup's or the node's limit).")
        if growth:
            return (f"Here: it held {mb(growth[1])} before the SIGKILL, the other ranks up to {mb(growth[0])}: the "
                    "OOM killer's shape, though no OOM count hangdoc could read rose (`dmesg | grep -i oom` on the "
                    "node; a container's or scheduler's memory limit kills the same way): lower the batch size or "
                    "the DataLoader workers, or give the job more memory.")
        return ("Here: SIGKILL is what the kernel's OOM killer sends (`dmesg | grep -i oom`; the cgroup's "
                "memory.events) and what a scheduler sends at a memory or time limit; if memory grew before it "
                "died, lower the batch size or the DataLoader workers, or give the job more memory.")
    if sig == signals.SIGABRT and mismatch:
        return ("Here: gloo aborted on a collective mismatch: the ranks called different collectives, or the same "
                "one with different tensor sizes. Compare the collectives each rank called (the stacks above); "
                "TORCH_DISTRIBUTED_DEBUG=DETAIL makes torch check every collective's shape across ranks.")
    if sig == signals.SIGABRT:
        return ("Here: a native abort (std::terminate, a failed C++ assertion): read the lines quoted above; "
                "PYTHONFAULTHANDLER=1 prints the Python stack at the abort.")
    if sig in (signals.SIGSEGV, signals.SIGBUS, signals.SIGILL, signals.SIGFPE):
        extra = " SIGBUS is often /dev/shm too small (docker --shm-size)." if sig == signals.SIGBUS else ""
        return ("Here: a native crash in a C/C++ extension or library. PYTHONFAULTHANDLER=1 prints the Python "
                f"stack at the crash; a core dump (ulimit -c unlimited) shows the native one.{extra}")
    if sig is not None:
        return (f"Here: {signal_name(sig)} came from outside the rank: a scheduler's time limit or preemption, "
                "a user, or another process; the launcher sends SIGTERM only after another rank failed.")
    if raised is not None:
        return "Here: the rank raised the exception quoted at the top of the report; fix it where it was raised."
    if death.code is not None:
        return (f"Here: the rank exited with code {death.code} and no traceback reached the output: look for "
                "sys.exit / os._exit in the job, or send its output to a file so hangdoc can quote it.")
    return ("Here: its exit status could not be read; send the job's output to a file, or run it under "
            "`hangdoc run`, so the next crash says how.")


RULE = Rule(
    slug="rank-died",
    title="A rank died: killed by a signal or exited with an error",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a crash whose culprit rank has no more specific critical finding: says how it died "
            "(exit code N, or killed by SIGKILL / SIGSEGV / SIGABRT ...), read from its exit status as it "
            "died or from torchrun's Root Cause block; quotes its own last error lines (its traceback, "
            "gloo's or C++'s abort lines), where its last stack stood in the job's code, and for SIGKILL "
            "its memory and the kernel's OOM kill counters.",
    fix="Read how the rank died and its own last lines.",
)
