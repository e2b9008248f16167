"""Defaults the commands and the watch loop share, each defined once."""
from __future__ import annotations

INTERVAL_S = 2.0          # seconds between samples of `watch` and `run`
DEMO_INTERVAL_S = 1.0     # `demo` samples faster: its scenario hangs within seconds
MIN_INTERVAL_S = 0.1
