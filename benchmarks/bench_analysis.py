"""Benchmark the watch's analysis per round as the history grows (issue: a watcher left attached
for hours must not slow down). A node of 8 ranks x 8 DataLoader workers, sampled up to 600 times
(the watch's cap), is fed to the analysis one round at a time, as `hangdoc watch` does: kept
timelines (`LiveTimelines`) against rebuilding them from the whole history each round.

    python -m benchmarks.bench_analysis
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time

from hangdoc.report import judge
from hangdoc.analyze.timeline import LiveTimelines
from factories import node_bundle

AT = (30, 300, 600)
TARGET_MS = 50.0     # per round at 600 samples


def _rounds(healthy: bool, samples: int):
    full = node_bundle(0, 1, -1 if healthy else 3, 1.7e9, samples=samples, workers=8)
    full = dataclasses.replace(full, options=dataclasses.replace(full.options, hang_after_s=None))
    for n in range(1, samples + 1):
        yield n, dataclasses.replace(full, samples=full.samples[:n])


def bench_analysis(at=AT) -> list[dict]:
    """Median ms per round around each of `at` samples, kept vs rebuilt, for a job where every
    rank waits in all_reduce but one (its workers decompressing)."""
    top = max(at)
    live = LiveTimelines()
    kept: dict[int, float] = {}
    for n, bundle in _rounds(False, top):
        started = time.perf_counter()
        verdict = judge(bundle, live=live, lanes=False).report.verdict   # a watch's round: lanes come at its end
        kept[n] = (time.perf_counter() - started) * 1000
    rows = []
    for n, bundle in _rounds(False, top):
        if n not in at:
            continue
        started = time.perf_counter()
        judge(bundle, lanes=False)
        rebuilt = (time.perf_counter() - started) * 1000
        window = [kept[k] for k in range(max(1, n - 4), n + 1)]
        rows.append({"samples": n, "kept_ms": round(statistics.median(window), 1), "rebuilt_ms": round(rebuilt, 1),
                     "verdict": verdict})
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'samples':>7} {'kept (watch)':>13} {'rebuilt':>9}"]
    lines += [f"{r['samples']:>7} {r['kept_ms']:>10.1f} ms {r['rebuilt_ms']:>6.1f} ms" for r in rows]
    return "\n".join(lines)


def main() -> int:
    rows = bench_analysis()
    print(table(rows))
    top = rows[-1]
    ok = top["kept_ms"] <= TARGET_MS
    print(f"target: <= {TARGET_MS:.0f} ms per round at {top['samples']} samples: "
          f"{top['kept_ms']:.1f} ms, {'met' if ok else 'MISSED'}")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
