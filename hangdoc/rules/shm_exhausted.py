"""shm-exhausted: /dev/shm ran out under the DataLoader workers: they die with a bus error, or the
loader fails with "No space left on device" for a torch_* shared-memory file."""
from __future__ import annotations

from hangdoc.base.words import size
from hangdoc.model import Finding, Severity
from hangdoc.model.logline import line_rank, strip_rank
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.logs import find_lines

# What PyTorch prints when a worker cannot place a batch in shared memory.
SHM_ERRORS = ("unable to allocate shared memory", "out of shared memory", "unable to write to file </torch_",
              "No space left on device (28)")
SHOWN_LINES = 3


def check(ctx: Context) -> list[Finding]:
    readings = [s.shm for s in ctx.bundle.samples if s.shm is not None]
    if not readings:
        return []
    lines = [(tail, i) for tail, i in find_lines(ctx.bundle.logs, *SHM_ERRORS)
             if "shm" in tail.lines[i] or "shared memory" in tail.lines[i] or "/torch_" in tail.lines[i]]
    bus = {pid: how for pid, how in ctx.worked.killed_workers.items() if "Bus error" in how}
    if not lines and not bus:
        return []
    peak = max(readings, key=lambda r: r.used_bytes)
    last = readings[-1]
    evidence = [f"/dev/shm as the ranks see it: {size(last.size_bytes)}; at most {size(peak.used_bytes)} used "
                f"({100 * peak.used_bytes / peak.size_bytes:.0f}%) over {len(readings)} samples"]
    evidence += [f"{tail.source}: {strip_rank(tail.lines[i]).strip()}" for tail, i in lines[:SHOWN_LINES]]
    if len(lines) > SHOWN_LINES:
        evidence.append(f"... and {len(lines) - SHOWN_LINES} more such lines")
    evidence += [f"DataLoader worker (pid {pid}) was killed by signal: {how}" for pid, how in sorted(bus.items())]
    ranks = sorted({r for tail, i in lines if (r := line_rank(tail.lines[i])) is not None})
    return [finding(
        RULE, ranks,
        f"/dev/shm ({size(last.size_bytes)}) ran out: the DataLoader workers could not hand over their batches",
        evidence, RULE.fix,
    )]


RULE = Rule(
    slug="shm-exhausted",
    title="/dev/shm ran out under the DataLoader workers",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires when the job's log says a worker could not place a batch in shared memory "
            "(\"unable to allocate shared memory\", \"No space left on device\" for a torch_* file) or a worker "
            "was killed by a bus error, and /dev/shm was read (statvfs through the first rank's root, every "
            "sample): gives its size and the most of it seen used.",
    fix="Give the job a larger /dev/shm: docker run --shm-size=16g (or --ipc=host), Kubernetes: an emptyDir "
        "with medium: Memory mounted at /dev/shm; or hand over smaller batches (batch_size, prefetch_factor, "
        "num_workers).",
)
