"""slow-decompression: the culprit's DataLoader workers spend their time decompressing shards."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hangdoc.model import Cause, Finding, ProcessInfo, Severity
from hangdoc.rules.snippets import REPACK_SNIPPET
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.decoding import compression_of_frames, compression_of_path, member_decode_frames
from hangdoc.rules.evidence import rank_line, worker_name
from hangdoc.rules.samples import (
    above_worker_loop, basename, chain, cpu_use, file_read_line, file_reads, FileRead, latest_frames, rate, recent_worker_frames,
)

_SEEKS = ("BZ2File.seek", "LZMAFile.seek", "GzipFile.seek", "DecompressReader.seek")


@dataclass(frozen=True)
class _Worker:
    info: ProcessInfo
    frames: tuple
    kind: str | None                # from the frames: "bz2", "gzip", ..., "" generic, None: no frames
    reads: tuple[FileRead, ...]     # compressed files it read from during the capture


def _decompressing(ctx: Context, worker: ProcessInfo) -> _Worker | None:
    if member_decode_frames(ctx.bundle, worker.pid):
        return None   # a decoder seeking in a tar member: tar-member-decode says why
    if ctx.rereads(worker.pid):
        return None   # the same lap read again for ever: reread-loop says why
    frames = (recent_worker_frames(ctx.bundle, worker.pid, lambda f: compression_of_frames(f) is not None)
              or above_worker_loop(latest_frames(ctx.bundle, worker.pid)))
    kind = compression_of_frames(frames)
    reads = tuple(r for r in file_reads(ctx.bundle, worker.pid)
                  if compression_of_path(r.path) and r.read_bytes > 0)
    if kind is None and not reads:
        return None
    return _Worker(worker, frames, kind, reads)


def check(ctx: Context) -> list[Finding]:
    findings = []
    reread = {rank for rank, slug in ctx.explained(Cause.WORKERS).items() if slug == "reread-loop"}
    for view in ctx.starved_culprits():
        if reread.intersection(view.ranks):
            continue      # a worker of its reads one record for ever: its other workers' decompressing is no cause
        alive = [w for w, _, is_alive in view.workers if is_alive]
        busy = [b for b in (_decompressing(ctx, w) for w in alive) if b is not None]
        if busy:
            findings.append(_finding(ctx, view, busy, [rank_line(ctx, view)]))
    for view in ctx.data_stragglers():
        # The job moves: the workers of its window count, those an epoch's end has retired too.
        busy = [b for b in (_decompressing(ctx, w) for w, _, _ in view.workers) if b is not None]
        shares = ctx.shares(view)
        if busy and shares is not None:
            slow = ctx.diagnosis.slow
            line = (f"rank {view.info.rank} (pid {view.info.node_pid}): waits on its DataLoader in {shares.data:.0%} "
                    f"of {shares.samples} samples while the others wait for it {slow.others_wait:.0%} of every step")
            findings.append(_finding(ctx, view, busy, [line], Severity.WARNING))
    for view in ctx.long_batch():
        busy = [b for b in (_decompressing(ctx, w) for w, _, is_alive in view.workers if is_alive) if b is not None]
        if busy:
            line = (f"rank {view.info.rank} (pid {view.info.node_pid}): has waited {ctx.diagnosis.slow.waited_s:.0f} s "
                    "on one batch, longer than the hang threshold, while its workers decompress")
            found = _finding(ctx, view, busy, [line], Severity.WARNING)
            findings.append(dataclasses.replace(found, cause=f"{_kind(busy)} shards decompressed by its workers"))
    return findings


def _kind(busy: list[_Worker]) -> str:
    kinds = [b.kind for b in busy if b.kind] + [compression_of_path(r.path) for b in busy for r in b.reads]
    return kinds[0] if kinds else "compressed"


def _finding(ctx: Context, view, busy: list[_Worker], evidence: list[str],
             severity: Severity | None = None) -> Finding:
    rank = view.info.rank
    kind = _kind(busy)
    effect = "make this rank the straggler" if severity is Severity.WARNING else "starve this rank"
    rates = []
    for b in busy:
        name = worker_name(b.info)
        for read in b.reads:
            evidence.append(f"{name} reads {file_read_line(read)}")
            if read.bytes_per_s:
                rates.append((read, read.bytes_per_s))
                if read.size:
                    evidence.append(f"{name}: at this rate one pass over {basename(read.path)} takes "
                                    f"{read.size / read.bytes_per_s:.0f} s")
        if not b.reads:
            evidence.append(f"{name} holds no compressed file open: it decompresses data already in memory")
        if b.frames:
            evidence.append(f"{name} stack: {chain(b.frames)}")
        seek = next((f for f in b.frames if f.name in _SEEKS), None)
        if seek is not None:
            evidence.append(f"{name} seeks in the compressed stream ({seek.label}): a seek decompresses "
                            "everything up to its target, a backward one from the start of the file")
        used = cpu_use(ctx.bundle, b.info.pid)
        if used and used[1] > 0:
            evidence.append(f"{name} used {used[0]:.1f} s of CPU in {used[1]:.1f} s "
                            f"({100 * used[0] / used[1]:.0f}% of a core)")
    if rates:
        read, speed = rates[0]
        more = (f" ({len(rates)} shards, {rate(sum(s for _, s in rates))} in all)" if len(rates) > 1 else "")
        title = (f"Rank {rank}'s DataLoader workers are decompressing {basename(read.path)} at {rate(speed)}"
                 f"{more}; {kind} shards {effect}")
        measured = ", ".join(f"{basename(r.path)} {rate(s)}" for r, s in rates)
        fix = (f"{RULE.fix} Observed on rank {rank}: {measured} of compressed input "
               f"with {len(busy)} of its workers decompressing; an uncompressed .tar is read at disk speed.")
    elif any(b.reads for b in busy):
        title = f"Rank {rank}'s DataLoader workers are decompressing {kind} data; {kind} shards {effect}"
        fix = RULE.fix
    else:
        # No compressed file open: the data was decompressed from memory (records held compressed,
        # blobs from a database or a socket), so no shard is to blame and none is to re-pack.
        effect = "makes this rank the straggler" if severity is Severity.WARNING else "starves this rank"
        title = (f"Rank {rank}'s DataLoader workers are decompressing {kind} data held in memory (no compressed "
                 f"file open); the decompression {effect}")
        fix = ("Decompress the data once, ahead of training, and hand the workers the uncompressed records; or "
               "spread the decompression over more DataLoader workers.")
    return finding(RULE, [rank], title, evidence, fix, severity)


RULE = Rule(
    slug="slow-decompression",
    title="A rank's DataLoader workers are stuck decompressing shards",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires on a hang when the culprit waits on its DataLoader and its workers sit in "
            "bz2/lzma/gzip/zlib frames or read .bz2/.gz/.xz/.zst files; cites each shard, the rate its "
            "read offset moves (compressed MB/s) and the frames. On a slow job (a warning) it says why a "
            "straggler that waits on its DataLoader is late, or why one batch outlasts the hang threshold "
            "while its workers' data moves on.",
    fix='Re-pack the shards as uncompressed .tar (bz2 decompresses at tens of MB/s per core) or spread '
        'the compressed shards evenly over ranks and add DataLoader workers.',
    snippet=REPACK_SNIPPET,
    commands=("watch", "report", "run", "check"),
    causes=frozenset({Cause.WORKERS}),
)
