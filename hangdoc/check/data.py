"""`check data`: lists -> metadata pass -> sampled throughput -> partition -> findings."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hangdoc.check.compression import NONE
from hangdoc.check.data_rules import data_findings
from hangdoc.check.datalist import SHARD, read_lists
from hangdoc.check.model import CHECK_SCHEMA, CheckResult, DataFacts, ListSummary, ShardInfo
from hangdoc.check.partition import summarize
from hangdoc.base.partition import classic_split, torch_split
from hangdoc.check.rawscan import scan_audio
from hangdoc.check.tarscan import scan_shard
from hangdoc.check.throughput import can_read, choose_sample, measure_shard
from hangdoc.check.units import raw_units, shard_units
from hangdoc.base.errors import HangdocError
from hangdoc.base.limits import MAX_CHECK_WORKERS, MAX_WORLD

DEFAULT_SAMPLE = 4


def check_data(list_paths: Sequence[str | Path], world_size: int, num_workers: int, *,
               sample: int = DEFAULT_SAMPLE, batch_size: int | None = None,
               scratch_dir: str | None = None, clock: Callable[[], float] = time.perf_counter,
               progress: Callable[[int, int], None] = lambda done, total: None) -> CheckResult:
    """Check data lists as `world_size` ranks x `num_workers` DataLoader workers will read them."""
    _validate(list_paths, world_size, num_workers, sample, batch_size)
    lists = read_lists(list_paths)
    entries = [e for data in lists for e in data.entries]
    kind = lists[0].kind

    started = clock()
    shards: list[ShardInfo] = []
    missing_audio: tuple[ShardInfo, ...] = ()
    sizes: tuple[int, ...] = ()
    if kind == SHARD:
        for i, e in enumerate(entries):
            shards.append(scan_shard(i, e.path, e.source))
            if i % 64 == 63 or i == len(entries) - 1:
                progress(i + 1, len(entries))
    else:
        sizes, missing_audio = scan_audio(entries)
    metadata_s = clock() - started

    started = clock()
    throughput = []
    for index in choose_sample(shards, sample):
        measured, shards[index] = measure_shard(shards[index], scratch_dir)
        if measured is not None:
            throughput.append(measured)
    sample_s = clock() - started

    if kind == SHARD:
        units, estimated = shard_units(shards)
    else:
        units, estimated = raw_units(entries, sizes), 0
    n = len(units)
    classic = summarize("classic", classic_split(n, world_size, num_workers), units,
                        batch_size=batch_size, list_indices=kind == SHARD)
    torch_order = summarize("torch", torch_split(n, world_size, num_workers), units,
                            batch_size=batch_size, list_indices=kind == SHARD)

    facts = DataFacts(
        kind=kind,
        lists=tuple(ListSummary(d.path, d.kind, len(d.entries), len(d.bad_lines)) for d in lists),
        world_size=world_size, num_workers=num_workers, batch_size=batch_size, items=n,
        shards=tuple(shards), throughput=tuple(throughput),
        classic=classic, torch=torch_order, orders_agree=classic.ranks == torch_order.ranks,
        estimated_shards=estimated, metadata_s=metadata_s, sample_s=sample_s,
        bad_lines=tuple(b for d in lists for b in d.bad_lines), missing_audio=missing_audio,
        notes=_notes(kind, shards, estimated, len(throughput)),
    )
    return CheckResult(CHECK_SCHEMA, "data", data_findings(facts), facts)


def _validate(list_paths: Sequence, world_size: int, num_workers: int, sample: int,
              batch_size: int | None) -> None:
    if not list_paths:
        raise HangdocError("give at least one data list")
    if world_size < 1:
        raise HangdocError(f"--world-size must be at least 1, got {world_size}")
    if num_workers < 1:
        raise HangdocError(f"--num-workers must be at least 1, got {num_workers} "
                           "(with num_workers=0 the rank reads as one worker: pass 1)")
    if world_size > MAX_WORLD or world_size * num_workers > MAX_CHECK_WORKERS:
        raise HangdocError(f"--world-size {world_size:,} x --num-workers {num_workers:,} is beyond a budget: "
                           f"at most {MAX_WORLD:,} ranks and {MAX_CHECK_WORKERS:,} workers in all are modelled "
                           "(docs/check.md, budgets)")
    if sample < 0:
        raise HangdocError(f"--sample must be 0 or more, got {sample}")
    if batch_size is not None and batch_size < 1:
        raise HangdocError(f"--batch-size must be at least 1, got {batch_size}")


def _notes(kind: str, shards: Sequence[ShardInfo], estimated: int, sampled: int) -> tuple[str, ...]:
    if kind != SHARD:
        return ("raw list: every line is one utterance and the partition splits lines",)
    notes = ["compression is read from each shard's magic bytes; members are counted from the tar "
             "headers of uncompressed shards and, for compressed ones, only in the sampled ones"]
    compressed = sum(1 for s in shards if s.compression not in (None, NONE))
    unreadable = sorted({s.compression for s in shards if s.compression and not can_read(s.compression)})
    if unreadable:
        notes.append(f"{', '.join(unreadable)} shards are not sampled: reading zstd needs Python 3.14 "
                     "or `pip install zstandard`")
    if estimated:
        notes.append(f"not decompressed: {estimated} of {compressed} compressed shards; their utterances are "
                     f"estimated from their size ({sampled} shards sampled; raise --sample to count more)")
    return tuple(notes)
