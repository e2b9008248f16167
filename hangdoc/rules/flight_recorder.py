"""flight-recorder: the job's own collective record names the stuck collective and who never issued it."""
from __future__ import annotations

from hangdoc.base.words import rank_ranges
from hangdoc.analyze.flight import GroupFlight
from hangdoc.rules.flight_words import frames_lines, mismatch_line, progress_lines, stuck_line
from hangdoc.model import Finding, Severity, SplitCause, Verdict
from hangdoc.rules.split_fixes import FIXES
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.samples import frames_line


def culprits(group: GroupFlight) -> tuple[int, ...]:
    """The ranks that never issued the stuck collective; with a mismatch, the minority's ranks."""
    if group.missing:
        return group.missing
    differs = next((m for m in group.mismatches if m.seq == group.stuck_seq), None)
    if differs is None:
        return ()
    kinds: dict[str, list[int]] = {}
    for rank, value in differs.by_rank:
        kinds.setdefault(value, []).append(rank)
    if len(kinds) < 2:
        return ()
    sizes = sorted((len(ranks) for ranks in kinds.values()), reverse=True)
    if sizes[0] == sizes[1]:        # no majority: every rank of the mismatch is named
        return tuple(sorted(r for ranks in kinds.values() for r in ranks))
    common = max(kinds.values(), key=len)
    return tuple(sorted(r for ranks in kinds.values() if ranks is not common for r in ranks))


def title(group: GroupFlight) -> str:
    differs = next((m for m in group.mismatches if m.seq == group.stuck_seq), None)
    if differs is not None:
        kinds = " vs ".join(dict.fromkeys(v for _, v in differs.by_rank))
        return (f"Ranks issued different collectives as #{group.stuck_seq} of {group.label} "
                f"({differs.what}: {kinds})")
    what = f"{group.stuck_op or 'collective'} #{group.stuck_seq} of {group.label}"
    if not group.missing:
        return f"Every rank with a dump entered {what} and none completed it"
    who = rank_ranges(group.missing)
    return (f"Rank{'s' if len(group.missing) > 1 else ''} {who} never issued {what}, "
            f"which rank{'s' if len(group.entered) > 1 else ''} {rank_ranges(group.entered)} entered")


def check(ctx: Context) -> list[Finding]:
    bundle = ctx.bundle
    if not bundle.flight_records:
        return []
    # Live evidence decides whether this is a hang; dumps alone (`hangdoc report DUMPS`) speak for themselves.
    if bundle.job.ranks and ctx.diagnosis.verdict != Verdict.HANG:
        return []
    findings = []
    for group in ctx.worked.flights:
        line = stuck_line(group)
        if line is None:
            continue
        evidence = [f"FR: {line}"]
        evidence += [f"FR: {mismatch_line(group, m)}" for m in group.mismatches if m.seq != group.stuck_seq][:3]
        evidence += progress_lines(group)
        evidence += frames_lines(group)
        for rank in culprits(group) or group.entered:
            info = next((p for p in bundle.job.ranks if p.rank == rank), None)
            stack = frames_line(bundle, info.pid, depth=4) if info is not None else None
            if stack:
                evidence.append(f"rank {rank} live stack: {stack}")
        if group.no_dump:
            evidence.append(f"FR: no dump from rank(s) {', '.join(map(str, group.no_dump))} of {group.label}")
        evidence.append(_sources(bundle, group))
        evidence += [f"FR: {line}" for line in bundle.flight_errors[:3]]
        if bundle.ras is not None and bundle.ras.status == "ok":
            evidence += ras_lines(bundle.ras)
        ranks = culprits(group) or group.entered
        mismatch = any(m.seq == group.stuck_seq for m in group.mismatches)
        fix = FIXES[SplitCause.UNKNOWN] if mismatch else RULE.fix
        findings.append(finding(RULE, ranks, title(group), evidence, fix))
    return findings


def _sources(bundle, group: GroupFlight) -> str:
    ranks = {r.rank for r in group.ranks}
    records = [r for r in bundle.flight_records if r.rank in ranks]
    forms = "/".join(sorted({r.form for r in records}))
    triggers = "/".join(sorted({r.trigger for r in records}))
    versions = "/".join(sorted({r.version for r in records}))
    return (f"FR dumps read: {len(records)} file(s) of {len(ranks)} rank(s) ({forms}, FR format {versions}, "
            f"{triggers})")


def ras_lines(ras) -> list[str]:
    """NCCL RAS's view: communicators with missing or dead ranks, and uneven collective counts."""
    lines = []
    for comm in ras.communicators:
        counts = sorted(set(comm.collective_counts.values()))
        if comm.missing_ranks or comm.dead_ranks or len(counts) > 1:
            parts = [f"NCCL RAS: communicator {comm.hash} ({comm.size} ranks)"]
            if comm.missing_ranks:
                parts.append(f"missing ranks {', '.join(map(str, comm.missing_ranks))}")
            if comm.dead_ranks:
                parts.append(f"dead ranks {', '.join(map(str, comm.dead_ranks))}")
            if len(counts) > 1:
                low = sorted(int(r) for r, c in comm.collective_counts.items() if c == counts[0])
                parts.append(f"collective counts {counts[0]}..{counts[-1]}, lowest on rank(s) "
                             f"{', '.join(map(str, low))}")
            lines.append(": ".join(parts[:1]) + ": " + "; ".join(parts[1:]))
    if ras.dead_processes:
        lines.append(f"NCCL RAS: {ras.dead_processes} job process(es) considered dead")
    return lines


RULE = Rule(
    slug="flight-recorder",
    title="The job's Flight Recorder names the stuck collective and the ranks that never issued it",
    severity=Severity.CRITICAL,
    check=check,
    summary="Reads the ranks' PyTorch Flight Recorder dumps (pickle or JSON, read without executing "
            "anything): per process group, each rank's last enqueued and completed collective, the first "
            "collective not every rank completed, the ranks that never issued it, and collectives that "
            "differ between ranks at one sequence number (op, sizes, dtypes).",
    fix='Find out why the ranks named never reached that collective (their live stack says where they '
        "are; the others' FR frames say where it is issued): a rank still computing or loading data, a "
        'data-dependent branch, or an epoch that ends early on one rank; every rank must issue the same '
        'collectives in the same order with the same shapes and dtypes.',
)
