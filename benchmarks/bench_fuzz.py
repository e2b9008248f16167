"""The fuzz of `hangdoc report`'s inputs at length: more Hypothesis inputs of every kind than
`make test` runs, and the crafted corpus, in a child limited to 1 GiB (tests/unit/test_fuzz.py).

    python -m benchmarks.bench_fuzz [--examples N] [--seed S]
"""
from __future__ import annotations

import argparse
import json
import random

from tests.unit.test_fuzz import run_limited

EXAMPLES = 300     # per strategy: bundles, digests, FR pickles, FR JSON dumps


def bench_fuzz(examples: int = EXAMPLES, seed: int | None = None) -> dict:
    seed = random.randrange(1 << 30) if seed is None else seed
    return dict(run_limited(examples, seed, timeout=3600), seed=seed, examples_per_strategy=examples)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_fuzz")
    parser.add_argument("--examples", type=int, default=EXAMPLES)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    print(json.dumps(bench_fuzz(args.examples, args.seed), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
