"""Benchmark `check data`: the metadata pass over 1,000 shards and the sampled throughput pass.

`bench_check()` builds small WeNet-style tar shards (every tenth one bz2) in a temporary
directory, runs `check_data` on their list and returns the timings as a dict.
The shards were just written, so the page cache is warm: this times hangdoc, not the disk.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from hangdoc.check.data import check_data
from factories import write_list, write_shard

METADATA_TARGET_S = 2.0


def build_shards(folder: Path, n_shards: int, utterances: int = 10, wav_bytes: int = 8000,
                 bz2_every: int = 10) -> Path:
    """Write `n_shards` tar shards of `utterances` key.wav + key.txt pairs and their list."""
    names = []
    for s in range(n_shards):
        compressed = bool(bz2_every) and s % bz2_every == bz2_every - 1
        name = f"shard_{s:06d}.tar" + (".bz2" if compressed else "")
        write_shard(folder / name, (f"S{s:06d}U{u:03d}" for u in range(utterances)),
                    compression="bz2" if compressed else "none", wav_bytes=wav_bytes, seed=s)
        names.append(name)
    return write_list(folder / "data.list", names)


def bench_check(n_shards: int = 1000, sample: int = 4, world_size: int = 8, num_workers: int = 4,
                utterances: int = 10, wav_bytes: int = 8000) -> dict:
    """Time `check data`. Realistic WeNet shards hold about 1,000 utterances (2,000 members):
    `bench_check(200, utterances=1000, wav_bytes=256)` (small wavs: the pass reads headers only)."""
    with tempfile.TemporaryDirectory(prefix="hangdoc-bench-") as tmp:
        started = time.perf_counter()
        data_list = build_shards(Path(tmp), n_shards, utterances=utterances, wav_bytes=wav_bytes)
        build_s = time.perf_counter() - started
        started = time.perf_counter()
        result = check_data([data_list], world_size, num_workers, sample=sample, scratch_dir=tmp)
        total_s = time.perf_counter() - started
    facts = result.facts
    throughput = {}
    for t in facts.throughput:
        agg = throughput.setdefault(t.compression, {"shards": 0, "bytes": 0, "utterances": 0, "s": 0.0, "plain_s": 0.0})
        agg["shards"] += 1
        agg["bytes"] += t.tar_bytes
        agg["utterances"] += t.utterances
        agg["s"] += t.seconds
        agg["plain_s"] += t.plain_seconds
    per_kind = {kind: {"shards": a["shards"], "mb_per_s": round(a["bytes"] / a["s"] / 1e6, 1),
                       "utt_per_s": round(a["utterances"] / a["s"]), "slowdown": round(a["s"] / a["plain_s"], 1)}
                for kind, a in throughput.items()}
    return {
        "n_shards": n_shards,
        "world_size": world_size,
        "num_workers": num_workers,
        "build_s": round(build_s, 3),
        "metadata_s": round(facts.metadata_s, 3),
        "members_per_shard": 2 * utterances,
        "metadata_ms_per_shard": round(1000 * facts.metadata_s / max(n_shards, 1), 3),
        "metadata_us_per_member": round(1e6 * facts.metadata_s / max(n_shards * 2 * utterances, 1), 2),
        "metadata_target_s": METADATA_TARGET_S,
        "metadata_within_target": facts.metadata_s <= METADATA_TARGET_S * n_shards / 1000 * max(1, utterances / 10),
        "sample_s": round(facts.sample_s, 3),
        "sampled_shards": len(facts.throughput),
        "throughput": per_kind,
        "check_total_s": round(total_s, 3),
        "findings": sorted({f.rule for f in result.findings}),
    }


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--utterances", type=int, default=10, help="per shard; realistic: 1000")
    parser.add_argument("--wav-bytes", type=int, default=8000)
    args = parser.parse_args()
    print(json.dumps(bench_check(args.shards, utterances=args.utterances, wav_bytes=args.wav_bytes), indent=2))
