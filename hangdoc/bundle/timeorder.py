"""A bundle's samples in time order, as read: the analysis walks them by time (bisects, rates between
neighbours), and a stranger's bundle may hold them reversed, shuffled, or one dated far outside the
watch (`-1e11`, within the numbers' bounds, turned a healthy run into a hang of 28 million hours).

On reading, the samples are sorted by time; a sample dated twice (the same time as one kept), or
outside the capture (an hour before the job's first process started, or after the bundle was
saved), is set aside: it never reaches the analysis, and the bundle says so in one line."""
from __future__ import annotations

import dataclasses

from hangdoc.base.errors import BadBundle
from hangdoc.model import Bundle

SLACK_S = 3600.0          # clocks of merged nodes, a process start read coarsely


def capture_window(bundle: Bundle) -> tuple[float, float]:
    """The times a sample of this bundle can have: from an hour before its first process started
    (or any time, where none says when) to an hour after it was saved."""
    starts = [p.start_time for p in bundle.job.processes if p.start_time and p.start_time > 0]
    return (min(starts) - SLACK_S if starts else float("-inf")), bundle.created + SLACK_S


def in_time_order(bundle: Bundle, source: str = "bundle") -> Bundle:
    """The bundle with its samples sorted by time and those out of place set aside (one line in
    `set_aside`); BadBundle where none is left."""
    samples = bundle.samples
    ordered = all(a.time < b.time for a, b in zip(samples, samples[1:]))
    low, high = capture_window(bundle)
    if ordered and (not samples or (samples[0].time >= low and samples[-1].time <= high)):
        return bundle
    kept, outside, twice = [], 0, 0
    for snapshot in sorted(samples, key=lambda s: s.time):
        if not low <= snapshot.time <= high:
            outside += 1
        elif kept and snapshot.time <= kept[-1].time:
            twice += 1
        else:
            kept.append(snapshot)
    if not kept:
        raise BadBundle(f"{source} is damaged: none of its {len(samples)} samples is dated within the capture "
                        f"(from its first process's start to its save)")
    aside = [words for count, words in ((outside, f"{outside} dated outside the capture"),
                                        (twice, f"{twice} dated the same as another")) if count]
    said = ([] if ordered else ["read in time order"]) + ([" and ".join(aside) + " set aside, never read"] if aside else [])
    line = f"of its {len(samples)} samples (stored out of time order): " if not ordered else f"of its {len(samples)} samples: "
    line += "; ".join(said)
    return dataclasses.replace(bundle, samples=tuple(kept), set_aside=bundle.set_aside + (line,))
