"""The one statistic the reports quote with a range: a share's 95 % interval. Pure."""
from __future__ import annotations

import math

Z95 = 1.96


def interval(hits: int, n: int) -> tuple[float, float]:
    """Wilson's 95 % interval of a share of `hits` in `n`."""
    if n <= 0:
        return 0.0, 1.0
    p = hits / n
    denominator = 1 + Z95 ** 2 / n
    centre = (p + Z95 ** 2 / (2 * n)) / denominator
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)
