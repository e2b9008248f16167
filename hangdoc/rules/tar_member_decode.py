"""tar-member-decode: audio decoded straight from a tar member's file object, not from its bytes."""
from __future__ import annotations

from hangdoc.model import Cause, Finding, Severity, Verdict
from hangdoc.model.logline import line_rank, strip_rank
from hangdoc.rules.snippets import BYTES_FIRST_SNIPPET
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.decoding import compression_of_path, is_decoder_library, member_decode, member_decode_frames
from hangdoc.rules.evidence import worker_name
from hangdoc.rules.logs import find_lines, traceback_frames
from hangdoc.rules.samples import basename, chain, file_read_line, file_reads

# What decoders say when the member's file object cannot do what they ask of it.
LOG_ERRORS = ("'_Stream' object has no attribute 'seekable'", "Illegal seek",
              "seeking backwards is not allowed")


def check(ctx: Context) -> list[Finding]:
    return _from_stacks(ctx) + _from_logs(ctx)


def _from_stacks(ctx: Context) -> list[Finding]:
    d = ctx.diagnosis
    if d.verdict == Verdict.HANG:
        views, severity, retired_too = ctx.culprit_views(), None, False
    else:        # a straggler of a slow job: its workers of the window count, retired ones too
        views, severity, retired_too = ctx.data_stragglers(), Severity.WARNING, True
    findings = []
    for view in views:
        evidence, decoders, shards = [], [], []
        for worker, _, alive in view.workers:
            frames = member_decode_frames(ctx.bundle, worker.pid) if alive or retired_too else None
            if frames is None:
                continue
            hit = member_decode(frames)
            decoder, member_read = hit
            decoders.append(decoder)
            name = worker_name(worker)
            evidence.append(f"{name}: {decoder.label} reads the tar member through {member_read.label}")
            evidence.append(f"{name} stack: {chain(frames, 8)}")
            for read in file_reads(ctx.bundle, worker.pid):
                if read.read_bytes or read.backward_seeks:
                    shards.append(read)
                    evidence.append(f"{name} reads {file_read_line(read)}")
                    if compression_of_path(read.path) and read.backward_seeks:
                        evidence.append(f"{name}: every backward seek in {compression_of_path(read.path)} "
                                        "data restarts decompression from the start of the shard")
        if decoders:
            decoder = decoders[0]
            by = decoder.short_filename if is_decoder_library(decoder) else decoder.name
            where = f" of {basename(shards[0].path)}" if shards else ""
            kind = compression_of_path(shards[0].path) if shards else None
            back = sum(r.backward_seeks for r in shards)
            seeks = (f"each backward seek restarts {kind} decompression" if kind and back
                     else "the decoder's seeks go through the tar stream")
            findings.append(finding(
                RULE, [view.info.rank],
                f"Rank {view.info.rank}'s DataLoader workers decode audio ({by}) straight from tar members"
                f"{where}; {seeks}",
                evidence, RULE.fix, severity,
            ))
    return findings


def _from_logs(ctx: Context) -> list[Finding]:
    findings, seen = [], set()
    for tail, i in find_lines(ctx.bundle.logs, *LOG_ERRORS):
        line = tail.lines[i]
        message = strip_rank(line)
        rank = line_rank(line)
        if rank is None and len(ctx.diagnosis.culprits) == 1:
            rank = ctx.diagnosis.culprits[0]
        if (rank, message) in seen:
            continue
        seen.add((rank, message))
        who = f"Rank {rank}" if rank is not None else "A rank"
        evidence = [f"{tail.source}: {message}"]
        evidence += [f"  at {frame}" for frame in traceback_frames(tail.lines, i)]
        findings.append(finding(
            RULE, [rank],
            f"{who} decodes from a tar member stream that cannot seek: {message}",
            evidence, RULE.fix,
        ))
    return findings


RULE = Rule(
    slug="tar-member-decode",
    title="Audio is decoded straight from a tar member stream",
    severity=Severity.CRITICAL,
    check=check,
    summary="Fires when a culprit's worker stack has a decoder (wave, soundfile, torchaudio, a "
            "decode function) directly above tarfile's member reads (_FileInFile, _Stream), or when "
            "the logs say '_Stream' object has no attribute 'seekable' / Illegal seek.",
    fix="Read the member's bytes first and decode from memory: "
        'torchaudio.load(io.BytesIO(tar.extractfile(member).read())).',
    snippet=BYTES_FIRST_SNIPPET,
    causes=frozenset({Cause.WORKERS}),
)
