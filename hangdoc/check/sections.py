"""Lay a CheckResult out as a heading, findings and tables; text and Markdown draw the same layout.

Pure: it decides what the user reads (which rows, which numbers, how they are phrased),
never how it is drawn.
"""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from hangdoc.check import ckpt_rules, data_rules, env_rules
from hangdoc.check.datalist import short_names
from hangdoc.base.words import plural, size
from hangdoc.check.model import CheckpointFacts, CheckResult, DataFacts, EnvFacts, Partition, ShardInfo
from hangdoc.model import Finding, Severity

MAX_SHARD_ROWS = 40
MAX_WORKER_ROWS = 64
# Every record `check` raises findings of, by slug: the code a finding's fix shows is read here, so
# the renderers draw it from the Document alone.
RAISED = {r.slug: r for r in (*env_rules.RECORDS, *env_rules.SHARED, *data_rules.RECORDS, *data_rules.SHARED,
                              *ckpt_rules.RECORDS)}


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Document:
    heading: str
    summary: str
    findings: tuple[Finding, ...]
    tables: tuple[Table, ...]
    snippets: Mapping[str, str] = field(default_factory=dict)   # slug -> the code its fix shows


def layout(result: CheckResult) -> Document:
    if isinstance(result.facts, DataFacts):
        heading, tables = _data(result.facts)
    elif isinstance(result.facts, EnvFacts):
        heading, tables = _env(result.facts)
    else:
        heading, tables = _checkpoint(result.facts)
    raised = [RAISED[f.rule] for f in result.findings if f.rule in RAISED]
    snippets = {r.slug: r.snippet for r in raised if r.snippet}
    return Document(f"hangdoc check {result.command}: {heading}", _summary(result.findings),
                    result.findings, tuple(tables), snippets)


def _summary(findings: tuple[Finding, ...]) -> str:
    if not findings:
        return "no findings"
    counts = Counter(f.severity for f in findings)
    parts = [f"{counts[s]} {s.value}{'s' if s is Severity.WARNING and counts[s] != 1 else ''}"
             for s in sorted(counts, key=lambda s: s.rank)]
    return f"{plural(len(findings), 'finding')}: {', '.join(parts)}"


# --- data ------------------------------------------------------------------------------------


def _data(facts: DataFacts) -> tuple[str, list[Table]]:
    word = "shard" if facts.kind == "shard" else "raw-list line"
    heading = (f"{plural(facts.items, word)} in {plural(len(facts.lists), 'list')}, "
               f"{plural(facts.world_size, 'rank')} x {plural(facts.num_workers, 'worker')}")
    tables = [_lists(facts)]
    if facts.shards:
        tables.append(_shards(facts))
    if facts.throughput:
        tables.append(_throughput(facts))
    tables.append(_ranks(facts))
    if facts.world_size * facts.num_workers <= MAX_WORKER_ROWS:
        tables.append(_workers(facts.classic, facts.kind))
    return heading, tables


def _shown(facts: DataFacts) -> dict[int, str]:
    """Shard paths relative to the folder that holds every list, when they live below it."""
    base = os.path.commonpath([os.path.dirname(os.path.abspath(s.path)) for s in facts.lists])
    shown = {}
    for shard in facts.shards:
        rel = os.path.relpath(shard.path, base) if "://" not in shard.path else shard.path
        shown[shard.index] = shard.path if rel.startswith("..") else rel
    return shown


def _lists(facts: DataFacts) -> Table:
    rows = []
    for summary in facts.lists:
        kinds = Counter(s.compression or s.status for s in facts.shards if s.dataset == summary.path)
        compression = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "-"
        rows.append((summary.path, summary.kind, f"{summary.entries:,}", compression, str(summary.bad_lines)))
    notes = (f"metadata pass {facts.metadata_s:.2f} s for {plural(facts.items, 'entry', 'entries')}; "
             f"sampled pass {facts.sample_s:.2f} s for {plural(len(facts.throughput), 'shard')}",) + facts.notes
    return Table("Lists", ("list", "kind", "entries", "compression", "bad lines"), tuple(rows), notes)


def _problem(shard: ShardInfo) -> bool:
    return shard.status != "ok" or bool(shard.unpaired or shard.strays) or shard.members == 0


def _shards(facts: DataFacts) -> Table:
    shards = list(facts.shards)
    notes: tuple[str, ...] = ()
    if len(shards) > MAX_SHARD_ROWS:
        problems = [s for s in shards if _problem(s)]
        shown = (problems + [s for s in shards if not _problem(s)])[:MAX_SHARD_ROWS]
        shards = sorted(shown, key=lambda s: s.index)
        notes = (f"{len(facts.shards) - len(shards):,} more shards without problems; all of them in --format json",)
    rows = []
    shown = _shown(facts)
    for s in shards:
        status = s.status if not s.error else f"{s.status}: {s.error}"
        if s.status == "ok" and (s.unpaired or s.strays):
            status = f"{len(s.unpaired)} unpaired, {len(s.strays)} stray"
        rows.append((str(s.index), shown[s.index], s.compression or "-",
                     "-" if s.members is None else f"{s.members:,}",
                     "-" if s.utterances is None else f"{s.utterances:,}",
                     "-" if s.size_bytes is None else size(s.size_bytes), status))
    if any(s.status == "ok" and s.members is None for s in facts.shards):
        notes += ("'-' members: compressed and not sampled, so not decompressed",)
    return Table("Shards", ("#", "shard", "compression", "members", "utterances", "size", "status"),
                 tuple(rows), notes)


def _throughput(facts: DataFacts) -> Table:
    shown = _shown(facts)
    rows = tuple((str(t.index), shown[t.index], t.compression, f"{t.mb_per_s:,.1f}",
                  f"{t.utt_per_s:,.0f}", "1.0 x (plain)" if t.compression == "none" else f"{t.slowdown:,.1f} x slower")
                 for t in facts.throughput)
    return Table("Throughput (sampled: read + decompress + every member, as a worker reads)",
                 ("#", "shard", "compression", "MB/s", "utt/s", "vs the same tar uncompressed"), rows)


def _ranks(facts: DataFacts) -> Table:
    part = facts.classic
    datasets = [s.path for s in facts.lists] if len(facts.lists) > 1 else []
    kinds = sorted({k for r in part.ranks for k in r.compression_items}) if facts.kind == "shard" else []
    totals = {d: sum(r.dataset_utterances.get(d, 0) for r in part.ranks) for d in datasets}
    columns = ["rank", "shards" if facts.kind == "shard" else "lines", "utterances", "size"]
    columns += ["batches"] if facts.batch_size else []
    labels = short_names(datasets) if datasets else {}
    columns += [labels[d] for d in datasets] + kinds
    rows = []
    for r in part.ranks:
        row = [str(r.rank), f"{r.items:,}", f"{r.utterances:,}", size(r.bytes)]
        row += [f"{r.batches:,}"] if facts.batch_size else []
        row += [f"{100.0 * r.dataset_utterances.get(d, 0) / totals[d]:.0f} %" if totals[d] else "-" for d in datasets]
        row += [str(r.compression_items.get(k, 0)) for k in kinds]
        rows.append(tuple(row))
    order = ("torch's DataLoader sharding order (global worker = worker x W + rank) gives the same shards"
             if facts.orders_agree else "torch's DataLoader sharding order differs: see facts.torch in --format json")
    notes = [f"classic split shards[rank::{facts.world_size}][worker::{facts.num_workers}]; {order}"]
    if datasets:
        notes.append("a list's column: the rank's share of that list's utterances")
    if kinds:
        notes.append(f"{', '.join(kinds)}: the rank's shards of that compression")
    if facts.estimated_shards:
        notes.append(f"utterances include estimates for {plural(facts.estimated_shards, 'compressed shard')}")
    return Table("Per rank", tuple(columns), tuple(rows), tuple(notes))


def _workers(part: Partition, kind: str) -> Table:
    rows = []
    for r in part.ranks:
        for w in r.workers:
            shards = ", ".join(map(str, w.indices)) if kind == "shard" else f"{w.items:,} lines"
            rows.append((str(r.rank), str(w.worker), shards or "(none)", f"{w.utterances:,}", size(w.bytes)))
    return Table("Per worker", ("rank", "worker", "shards" if kind == "shard" else "lines", "utterances", "size"),
                 tuple(rows))


# --- env ---------------------------------------------------------------------------------------


def _env(f: EnvFacts) -> tuple[str, list[Table]]:
    launch = f.launch
    workers = "" if launch.num_workers is None else f" x {plural(launch.num_workers, 'worker')}"
    heading = f"{f.arch}, {plural(f.cpu.usable, 'usable CPU')}, {plural(launch.nproc_per_node, 'rank')}{workers}"
    quota = f", cgroup quota {f.cpu.quota:g}" if f.cpu.quota else ""
    spy = f"{f.py_spy.path} ({f.py_spy.version})" if f.py_spy.version else (f.py_spy.error or "not found")
    shm = ("not mounted" if f.shm.total_bytes is None
           else f"{size(f.shm.total_bytes)}, {size(f.shm.free_bytes or 0)} free")
    nvml = (f"{plural(f.nvml.gpus, 'GPU')}, driver {f.nvml.driver_version}" if f.nvml.available
            else f"unavailable: {f.nvml.reason}")
    scope = "no Yama (same-user tracing allowed)" if f.ptrace.scope is None else str(f.ptrace.scope)
    cap = {True: "yes", False: "no", None: "unknown"}[f.ptrace.cap_sys_ptrace]
    rows = (
        ("architecture", f.arch),
        ("start method", f"{f.start_method} (multiprocessing default, used by DataLoader)"),
        ("OpenMP / ACL libraries", ", ".join(f.openmp_libs) or "none found"),
        ("CPUs", f"{f.cpu.online} online, {f.cpu.usable} usable{quota}"),
        ("ptrace_scope", scope),
        ("CAP_SYS_PTRACE / uid", f"{cap} / {f.ptrace.uid}"),
        ("py-spy", spy),
        ("NVML", nvml),
        (f.shm.path, shm),
        ("launch", f"num_workers={'not given' if launch.num_workers is None else launch.num_workers}, nproc_per_node={launch.nproc_per_node}, "
                   f"prefetch_factor={launch.prefetch_factor}, batch_bytes="
                   f"{'?' if launch.batch_bytes is None else size(launch.batch_bytes)}"),
    )
    notes = () if launch.num_workers is not None else ("pass --num-workers to check workers against CPUs "
                                                       "and /dev/shm",)
    tables = [Table("Host", ("probe", "value"), rows, notes)]
    timeout_rows = tuple((k, v) for k, v in f.timeouts.items()) + tuple(
        (k, v) for k, v in f.collective_env.items())
    tables.append(Table("Collective timeouts", ("backend / variable", "value"), timeout_rows,
                        ("init_process_group(timeout=...) in the training script overrides the defaults",)))
    return heading, tables


# --- checkpoint --------------------------------------------------------------------------------


def _checkpoint(f: CheckpointFacts) -> tuple[str, list[Table]]:
    heading = f"{f.path} ({size(f.size_bytes)})"
    tables = [Table("A resume restores", ("what", "restored from"),
                    tuple((r.what, r.found or "NOT SAVED") for r in f.restores))]
    tables.append(Table("Checkpoint keys", ("key", "kind", "summary"),
                        tuple((k.path, k.kind, k.summary) for k in f.keys)))
    if f.side_car:
        tables.append(Table(f"Side-car {f.side_car}", ("key", "value"), tuple(f.side_car_keys.items())))
    return heading, tables
