"""Findings about a data list and its partition: pure functions of `DataFacts`."""
from __future__ import annotations

import os
from collections.abc import Sequence

from hangdoc.check.compression import slow_kinds
from hangdoc.check.datalist import short_names
from hangdoc.check.findings import MAX_EVIDENCE, ordered
from hangdoc.base.words import plural, rank_list, size
from hangdoc.check.model import DataFacts, Partition, ShardInfo, Throughput
from hangdoc.base.partition import owner
from hangdoc.model import Finding, Rule, Severity, finding
from hangdoc.rules.slow_decompression import RULE as SLOW_DECOMPRESSION
from hangdoc.rules.uneven_shards import RULE as UNEVEN_SHARDS

MAX_RANK_LINES = 8
SLOW_IMBALANCE = 1.25       # a rank with 25 % more slow bytes than another is behind


def data_findings(facts: DataFacts) -> tuple[Finding, ...]:
    found: list[Finding] = []
    found += bad_list_entries(facts)
    found += shards_with_status(facts, facts.shards, "missing", MISSING_SHARD)
    found += shards_with_status(facts, facts.missing_audio, "missing", MISSING_AUDIO)
    found += shards_with_status(facts, facts.shards, "unreadable", UNREADABLE_SHARD)
    found += unpaired_members(facts)
    found += empty_shards(facts)
    found += remote_shards(facts)
    found += uneven_shards(facts)
    found += empty_workers(facts.classic)
    found += slow_decompression(facts)
    return ordered(found)


def _where(facts: DataFacts, index: int) -> tuple[int, int]:
    return owner(index, facts.world_size, facts.num_workers)


def bad_list_entries(facts: DataFacts) -> list[Finding]:
    if not facts.bad_lines:
        return []
    evidence = [f"{b.source}:{b.line}: {b.why}" for b in facts.bad_lines]
    return [finding(BAD_LIST_ENTRY, (),
                    f"{plural(len(facts.bad_lines), 'line')} of the data list cannot be parsed", evidence,
                    severity=Severity.CRITICAL, max_evidence=MAX_EVIDENCE)]


_STATUS_TITLES = {
    "missing-shard": ("shard named in the list does not exist", "shards named in the list do not exist"),
    "missing-audio": ("audio file named in the raw list does not exist",
                      "audio files named in the raw list do not exist"),
    "unreadable-shard": ("shard is not a readable tar archive", "shards are not readable tar archives"),
}


def shards_with_status(facts: DataFacts, shards: Sequence[ShardInfo], status: str, rule: Rule) -> list[Finding]:
    hits = [s for s in shards if s.status == status]
    if not hits:
        return []
    evidence = []
    for shard in hits:
        rank, worker = _where(facts, shard.index)
        why = f" ({shard.error})" if shard.error else ""
        evidence.append(f"#{shard.index} -> rank {rank}, worker {worker}: {shard.path}{why}")
    title = f"{len(hits):,} {_STATUS_TITLES[rule.slug][len(hits) != 1]}: the worker that reaches it stops the job"
    return [finding(rule, (_where(facts, s.index)[0] for s in hits), title, evidence,
                    severity=Severity.CRITICAL, max_evidence=MAX_EVIDENCE)]


def unpaired_members(facts: DataFacts) -> list[Finding]:
    broken = [s for s in facts.shards if s.unpaired]
    strays = [s for s in facts.shards if s.strays]
    if not broken and not strays:
        return []
    evidence = [f"#{s.index} {os.path.basename(s.path)}: {msg}" for s in broken for msg in s.unpaired]
    evidence += [f"#{s.index} {os.path.basename(s.path)}: stray member {name}" for s in strays for name in s.strays]
    ranks = (_where(facts, s.index)[0] for s in broken + strays)
    if broken:
        n = sum(len(s.unpaired) for s in broken)
        if all(s.layout != "webdataset" for s in broken):
            title = (f"{plural(n, 'utterance')} in {plural(len(broken), 'shard')} "
                     f"{'lacks' if n == 1 else 'lack'} audio or transcript: "
                     "the pipeline gets samples without 'wav' or 'txt'")
        else:
            title = (f"{plural(n, 'sample')} in {plural(len(broken), 'shard')} "
                     f"{'lacks' if n == 1 else 'lack'} a member the other samples have: "
                     "the pipeline gets samples without that field")
        return [finding(UNPAIRED_MEMBER, ranks, title, evidence,
                        severity=Severity.CRITICAL, max_evidence=MAX_EVIDENCE)]
    n = sum(len(s.strays) for s in strays)
    title = (f"{plural(len(strays), 'shard')} {'holds' if len(strays) == 1 else 'hold'} "
             f"{plural(n, 'stray member')} that {'is' if n == 1 else 'are'} neither audio nor transcript")
    return [finding(UNPAIRED_MEMBER, ranks, title, evidence, severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)]


def empty_shards(facts: DataFacts) -> list[Finding]:
    empty = [s for s in facts.shards if s.status == "ok" and s.members == 0]
    if not empty:
        return []
    evidence = [f"#{s.index} -> rank {_where(facts, s.index)[0]}: {s.path}" for s in empty]
    return [finding(EMPTY_SHARD, (_where(facts, s.index)[0] for s in empty),
                    f"{plural(len(empty), 'shard')} {'holds' if len(empty) == 1 else 'hold'} no members", evidence,
                    severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)]


def remote_shards(facts: DataFacts) -> list[Finding]:
    remote = [s for s in facts.shards if s.status == "remote"]
    if not remote:
        return []
    verb = "is a URL and was" if len(remote) == 1 else "are URLs and were"
    return [finding(REMOTE_SHARD, (), f"{plural(len(remote), 'shard')} {verb} not checked",
                    [s.path for s in remote], severity=Severity.INFO, max_evidence=MAX_EVIDENCE)]


def _metric(facts: DataFacts) -> tuple[str, list[int]]:
    ranks = facts.classic.ranks
    if facts.batch_size:
        return "batches", [r.batches or 0 for r in ranks]
    if any(r.utterances for r in ranks):
        return "utterances", [r.utterances for r in ranks]
    return ("shards" if facts.kind == "shard" else "lines"), [r.items for r in ranks]


def uneven_shards(facts: DataFacts) -> list[Finding]:
    metric, values = _metric(facts)
    hi, lo = max(values), min(values)
    if hi == lo:
        return []
    behind = [r for r, v in enumerate(values) if v < hi]
    ahead = values.index(hi)
    pct = 100.0 * (hi - lo) / hi
    title = (f"{rank_list(behind)} {'gets' if len(behind) == 1 else 'get'} as few as {lo:,} {metric}, rank {ahead} "
             f"gets {hi:,} (spread {hi - lo:,}, {pct:.0f} %): ranks leave the epoch at different times")
    evidence = [_rank_line(facts, share.rank) for share in facts.classic.ranks[:MAX_RANK_LINES]]
    if len(facts.classic.ranks) > MAX_RANK_LINES:
        evidence.append(f"... {len(facts.classic.ranks) - MAX_RANK_LINES} more ranks")
    slots = facts.world_size * facts.num_workers
    word = "shards" if facts.kind == "shard" else "lines"
    if facts.items % slots:
        evidence.append(f"{facts.items:,} {word} over {facts.world_size} ranks x {facts.num_workers} workers: "
                        f"{facts.items:,} is not a multiple of {slots}")
    if facts.estimated_shards:
        evidence.append(f"utterances of {plural(facts.estimated_shards, 'compressed shard')} estimated "
                        "from their size (not sampled)")
    severity = Severity.CRITICAL if lo == 0 else Severity.WARNING
    return [finding(UNEVEN_SHARDS, behind, title, evidence, severity=severity, max_evidence=MAX_EVIDENCE)]


def _rank_line(facts: DataFacts, rank: int) -> str:
    share = facts.classic.ranks[rank]
    word = "shard" if facts.kind == "shard" else "line"
    line = (f"rank {rank}: {plural(share.items, word)}, {plural(share.utterances, 'utterance')}, "
            f"{size(share.bytes)}")
    if share.batches is not None:
        line += f", {plural(share.batches, 'batch', 'batches')} of {facts.batch_size}"
    return line


def empty_workers(partition: Partition) -> list[Finding]:
    empty = [(r.rank, w.worker) for r in partition.ranks for w in r.workers if w.items == 0]
    if not empty:
        return []
    total = partition.world_size * partition.num_workers
    evidence = [f"rank {rank}, worker {worker}: no shard" for rank, worker in empty]
    return [finding(EMPTY_WORKER, (r for r, _ in empty),
                    f"{len(empty)} of {total} DataLoader workers get no shard", evidence,
                    severity=Severity.INFO, max_evidence=MAX_EVIDENCE)]


def _measured(throughput: Sequence[Throughput]) -> dict[str, tuple[float, float, float, int]]:
    """Per compression: (MB/s, utt/s, slowdown, samples) over every sampled shard of it."""
    out = {}
    for kind in {t.compression for t in throughput}:
        ts = [t for t in throughput if t.compression == kind]
        seconds = sum(t.seconds for t in ts)
        plain = sum(t.plain_seconds for t in ts)
        out[kind] = (sum(t.tar_bytes for t in ts) / seconds / 1e6, sum(t.utterances for t in ts) / seconds,
                     seconds / max(plain, 1e-9), len(ts))
    return out


def slow_decompression(facts: DataFacts) -> list[Finding]:
    ranks = facts.classic.ranks
    measured = _measured(facts.throughput)
    present = {k for r in ranks for k, n in r.compression_items.items() if n}
    slow = slow_kinds(present, {k: v[2] for k, v in measured.items()})
    if not slow:
        return []
    slow_bytes = [sum(r.compression_bytes.get(k, 0) for k in slow) for r in ranks]
    slow_items = [sum(r.compression_items.get(k, 0) for k in slow) for r in ranks]
    kinds = "/".join(sorted(slow))
    evidence = [_speed_line(kind, measured.get(kind)) for kind in sorted(slow)]
    evidence += [f"rank {r.rank}: {plural(slow_items[r.rank], kinds + ' shard')} ({size(slow_bytes[r.rank])}) "
                 f"of {plural(r.items, 'shard')}" for r in ranks[:MAX_RANK_LINES]]
    evidence += _dataset_lines(facts)
    speed = _speed_phrase(slow, measured)
    total = sum(slow_items)
    if max(slow_bytes) > SLOW_IMBALANCE * min(slow_bytes):
        mean = sum(slow_bytes) / len(slow_bytes)
        heavy = [r for r, b in enumerate(slow_bytes) if b > mean]
        got = sum(slow_items[r] for r in heavy)
        title = (f"{rank_list(heavy)} {'reads' if len(heavy) == 1 else 'read'} {got} of {total} {kinds} shards "
                 f"({100.0 * got / total:.0f} %){speed}: {'its' if len(heavy) == 1 else 'their'} "
                 "workers fall behind and the others wait in all-reduce")
        return [finding(SLOW_DECOMPRESSION, heavy, title, evidence,
                        severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)]
    title = (f"every rank reads {kinds} shards{speed}: evenly spread, but data loading is slower "
             "(watch for gpu-starved)")
    return [finding(SLOW_DECOMPRESSION, range(len(ranks)), title, evidence,
                    severity=Severity.INFO, max_evidence=MAX_EVIDENCE)]


def _speed_phrase(slow: frozenset[str], measured: dict) -> str:
    parts = [f"{k} reads {measured[k][2]:.0f} x slower than plain tar ({measured[k][0]:.1f} MB/s)"
             for k in sorted(slow) if k in measured]
    return f"; {', '.join(parts)}" if parts else ""


def _speed_line(kind: str, m: tuple[float, float, float, int] | None) -> str:
    if m is None:
        return (f"{kind}: not measured (no {kind} shard sampled; raise --sample); "
                f"{kind} decompresses at tens of MB/s per core")
    mb, utt, slowdown, n = m
    return (f"{kind}: {mb:.1f} MB/s, {utt:,.0f} utterances/s measured on {plural(n, 'sampled shard')}; "
            f"{slowdown:.1f} x slower than the same tar uncompressed")


def _dataset_lines(facts: DataFacts) -> list[str]:
    if len(facts.lists) < 2:
        return []
    lines = []
    labels = short_names([s.path for s in facts.lists])
    for summary in facts.lists:
        total = sum(r.dataset_utterances.get(summary.path, 0) for r in facts.classic.ranks)
        if not total:
            continue
        shares = ", ".join(f"rank {r.rank} {100.0 * r.dataset_utterances.get(summary.path, 0) / total:.0f} %"
                           for r in facts.classic.ranks[:MAX_RANK_LINES])
        lines.append(f"{labels[summary.path]} utterances: {shares}")
    return lines


# The slugs this checker declares, once: the registry (hangdoc/registry.py) reads RECORDS, so
# `hangdoc rules` lists them and `hangdoc explain` shows their pages; each finding is built from one.
MISSING_SHARD = Rule(
    slug="missing-shard",
    title='A file named in the data list does not exist',
    severity=Severity.CRITICAL,
    summary='A shard the data list names does not exist. The rank and DataLoader worker that would read '
            "it (by the classic split) fail or skip it, so that rank's epoch ends early or raises in the "
            'middle of training.',
    fix="Fix the path in the list (relative paths resolve against the list's directory) or remove the"
        ' line; the worker that reaches it raises and stops the job.',
    commands=("check",),
)

UNREADABLE_SHARD = Rule(
    slug="unreadable-shard",
    title='A shard cannot be read as a tar archive',
    severity=Severity.CRITICAL,
    summary='A shard is not a readable tar archive: truncated, not a tar at all, a directory, without '
            'read permission, or a compressed stream that fails to decompress. A worker that meets it '
            'raises, or loops on the error, mid-epoch.',
    fix='Re-create or re-download the shard (check permissions and truncated copies), or remove it '
        'from the list.',
    commands=("check",),
)

UNPAIRED_MEMBER = Rule(
    slug="unpaired-member",
    title="A shard's members do not make whole samples (key.wav + key.txt, or a webdataset key's fields)",
    severity=Severity.CRITICAL,
    summary='In a speech shard (WeNet), an utterance has audio without a transcript or a transcript '
            'without audio; in a webdataset shard (images, labels, JSON, arrays), a key lacks a member '
            'most keys of its shard have, or holds one field twice (critical: the sample cannot be '
            'built). A speech shard holding stray members only is a warning. Pipelines drop or crash on them.',
    fix='Re-pack the shard so that every sample is whole: two adjacent members key.<audio> and key.txt '
        "(speech, with no other members), or every field the other keys have (webdataset: key.jpg + key.cls).",
    commands=("check",),
)

EMPTY_SHARD = Rule(
    slug="empty-shard",
    title='A shard holds no members',
    severity=Severity.WARNING,
    summary='A tar shard has no members: the worker that reads it delivers nothing for that shard, and '
            'its rank runs out of data before the others.',
    fix="Remove empty shards from the list; they make their worker's share smaller.",
    commands=("check",),
)

EMPTY_WORKER = Rule(
    slug="empty-worker",
    title='Some DataLoader workers get no shard',
    severity=Severity.INFO,
    summary='A DataLoader worker gets no shard under the split (more world_size x num_workers readers '
            "than shards): it ends at once and its rank's batches come from fewer workers.",
    fix='Nothing breaks, but those workers idle; use fewer workers or more, smaller shards (at least '
        'world_size x num_workers).',
    commands=("check",),
)

REMOTE_SHARD = Rule(
    slug="remote-shard",
    title='A shard is a URL and was not checked',
    severity=Severity.INFO,
    summary='A list entry is a URL (s3://, http://): `check` does not fetch it, so its size, members and '
            'compression are not checked.',
    fix='Run `hangdoc check data` where the shards are mounted to check them.',
    commands=("check",),
)

BAD_LIST_ENTRY = Rule(
    slug="bad-list-entry",
    title='A line of the data list cannot be parsed',
    severity=Severity.CRITICAL,
    summary="A line of the data list cannot be parsed (a raw list's JSON line without `key`/`wav`/`txt`, "
            'a blank or garbled path): the dataset raises on it, or skips it silently, depending on the '
            'pipeline.',
    fix='Fix the line: a shard list holds one tar path per line; a raw list one JSON object with key,'
        ' wav and txt per line.',
    commands=("check",),
)

MISSING_AUDIO = Rule(
    slug="missing-audio",
    title='A raw list names an audio file that does not exist',
    severity=Severity.CRITICAL,
    summary='A raw list names a wav file that does not exist: the worker that reaches it raises '
            'mid-epoch.',
    fix='Fix the wav path in the list or remove the line.',
    commands=("check",),
)

RECORDS = (MISSING_SHARD, UNREADABLE_SHARD, UNPAIRED_MEMBER, EMPTY_SHARD, EMPTY_WORKER, REMOTE_SHARD,
           BAD_LIST_ENTRY, MISSING_AUDIO)
# The live rules' records this checker raises too; they are declared (and registered) with their
# rule, in hangdoc/rules/.
SHARED = (SLOW_DECOMPRESSION, UNEVEN_SHARDS)
