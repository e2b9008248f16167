"""worker-error: a DataLoader worker raised, and PyTorch re-raised it in the rank."""
from __future__ import annotations

import re

from hangdoc.model import Cause, Finding, LogTail, Severity
from hangdoc.model.logline import line_rank, strip_rank
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.logs import traceback_frames

_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b:?")
_KEY = re.compile(r"^KeyError: (.+)$")
SAMPLE_KEYS = ("'sample_rate'", "'wav'", "'feat'", "'txt'", "'label'", "'key'")


def _final_line(tail: LogTail, caught: int) -> int | None:
    """Index of the exception line that ends the worker's original traceback."""
    started = False
    for j in range(caught + 1, min(len(tail.lines), caught + 200)):
        text = strip_rank(tail.lines[j])
        if text.startswith("Original Traceback"):
            started = True
            continue
        if started and text and not text[0].isspace() and _EXCEPTION_LINE.match(text):
            return j
    return None


def check(ctx: Context) -> list[Finding]:
    findings, seen = [], set()
    for caught in ctx.worked.worker_errors:
        tail, exc, index, i = caught.tail, caught.exception, caught.worker, caught.line
        rank = line_rank(tail.lines[i])
        if rank is None and len(ctx.diagnosis.culprits) == 1:
            rank = ctx.diagnosis.culprits[0]
        end = _final_line(tail, i)
        raised = strip_rank(tail.lines[end]) if end is not None else exc
        if (rank, index, raised) in seen:
            continue
        seen.add((rank, index, raised))
        evidence = [f"{tail.source}: {strip_rank(tail.lines[i])}"]
        frames = traceback_frames(tail.lines, end, limit=5) if end is not None else []
        evidence += [f"  at {frame}" for frame in frames]
        evidence.append(raised)
        fix = RULE.fix
        key = _KEY.match(raised)
        if key and key.group(1) in SAMPLE_KEYS:
            where = frames[-1].split(" (")[0] if frames else "the consumer"
            evidence.append(f"a sample reached {where} without the key {key.group(1)}: the function that "
                            f"fills it (the audio decode step) sets it in only some branches")
            fix = (f"{fix} Here: make the decode function set sample[{key.group(1)}] in every branch "
                   "(tar bytes and file paths alike), or fail loudly in the branch that cannot.")
        who = f"rank {rank}" if rank is not None else "a rank"
        findings.append(finding(RULE, [rank], f"DataLoader worker {index} of {who} raised {raised}",
                                evidence, fix))
    return findings


RULE = Rule(
    slug="worker-error",
    title="A DataLoader worker raised an exception",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on `Caught X in DataLoader worker process N` in the job's log tails; cites the "
            "exception and the frames of the worker's original traceback, and names the decode step "
            "when a sample key (sample_rate, wav) is missing.",
    fix="Fix the exception in the worker's traceback; check that every sample gets every key (a decode "
        "function that sets sample['wav'] in only one branch).",
    causes=frozenset({Cause.WORKERS}),
)
