"""Did the job move on? Progress from the job's own loop, the step rhythm, and the hang threshold.

A rank *stepped* between two samples when its own code shows it (`stepped`):
- an integer local of one of its frames changed (`step`, `batch_idx`, `epoch`), or
- a non-integer local of a frame *below* the innermost one was rebound (a new `batch`
  object in the training loop: control came back to that frame), or
- it waits (collective, DataLoader, idle) in both samples and even its innermost frame's
  locals changed: it left the wait and came back to it.
Identity churn in the innermost frame of a computing rank is not a step: a loop that never
ends (`while True: x = f(x)`) rebinds its locals forever.

Only the training loop steps. A rank *parked* (idle, or in a wait of its own line: not
computing, not in a collective or the DataLoader) at the same place, frame for frame and line
for line, at both samples went at most round a loop around that wait: a poll or retry loop
(`while not acquired: attempts += 1; time.sleep(0.2)`). The integers of its innermost frame
count tries there, not steps (`polling`). A training loop that waits at one place every step
still steps: its outer frames move (control came back to the loop that called the wait), or
its innermost frame takes a new object (a new `batch` from a queue).

Counters are the integers a rank's samples have seen move, often enough (`Point.counts`, kept by
the timeline): `rank` or a batch size never moves, `epoch` hardly; their standing still says
nothing of the steps. Where the loop's counters cannot be read (a loop at module level: py-spy
reads no locals of a `<module>` frame; counters held in objects), the other witnesses stand in,
and the report says so:
- the stack going round the loop: the job's own position (`region`) differs between two samples
  and one of them found the rank in the step's own wait (a collective, its DataLoader): it left
  that wait, or reached it from elsewhere;
- a waiting rank woke up (its main thread's CPU and voluntary context switches, beyond what a
  blocking stack read costs) or moved bytes (gloo's sockets, its workers' pipes).
A rank blocked for good shows none of them: its frames stand, its main thread sleeps, its
sockets are quiet. "No step seen" is never read as "no step": the hang needs a witness that
saw nothing move.

Data moving is progress too (`data_sign`): a rank whose DataLoader workers read new ground in
their files (past the furthest offset each had reached: a bz2 shard decompressed at a few MB/s, a
step longer than any threshold), or seek back and read on to a new place each time (random access
into a compressed stream), is slow, not hung; the slow verdict and its rules say why. A reader that
rewinds to the same offsets again and again (`analyze/passes.py`) is no sign. A GPU at work is
progress too (`gpu_sign`: two readings in a row of kernels with memory traffic and power, not
NCCL's spin, which reads 100 % as well): a GPU straggler's step. A
`--hang-after` given is the user's own bound on a step and stands, data or GPU moving or not:
the witnesses still say that they moved.

The threshold: with a `--hang-after` it is that. Otherwise hangdoc learns the longest gap
between steady steps it has seen (any rank; a rank's first STARTUP_GAPS gaps are its start-up:
workers starting, a first batch, a compile, a checkpoint load) and calls a hang when no rank has
stepped for STEP_MULTIPLE times that, never less than HANG_FLOOR_S; before any steady step has
been seen it waits DEFAULT_HANG_AFTER_S.
"""
from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from hangdoc.analyze.classify import WORK_WAIT, place
from hangdoc.analyze.passes import reading_on
from hangdoc.analyze.rendezvous import joining
from hangdoc.analyze.timeline import IO_NOISE_BYTES, WAKEUPS_PER_DUMP, Point, Timeline, moved, moved_bytes, receiving
from hangdoc.model import Frame, FrameMark, GpuActivity, LoopMark, Progress, RankState, StepSummary

STEP_MULTIPLE = 3.0
HANG_FLOOR_S = 10.0
DEFAULT_HANG_AFTER_S = 60.0
STARTUP_GAPS = 1         # a rank's first gaps between steps seen that are its start-up, not its rhythm
WAIT_STATES = frozenset({RankState.COLLECTIVE, RankState.DATALOADER, RankState.IDLE})
# The waits a training step goes through every step: a rank seen in one of them at one sample and
# elsewhere in its own code at the other went round its loop.
STEP_WAITS = frozenset({RankState.COLLECTIVE, RankState.DATALOADER})
# Where a rank is not parked: it runs, or waits as a training step does, or is gone.
_NOT_PARKED = frozenset({RankState.COMPUTE, RankState.IO, RankState.COLLECTIVE, RankState.DATALOADER,
                         RankState.EXITED, RankState.UNKNOWN})


def _common_depth(a: LoopMark, b: LoopMark) -> int:
    depth = 0
    for fa, fb in zip(a.frames, b.frames):
        if fa.function != fb.function:
            break
        depth += 1
    return depth


def loop_moved(a: LoopMark, b: LoopMark, waiting: bool, poll: bool = False) -> bool:
    """Did the job's own code move on between two LoopMarks of one thread (see module doc)?
    `poll`: the thread was parked at the same place at both: its innermost frame's integers
    count the tries of a poll loop, not steps."""
    depth = _common_depth(a, b)
    last_a, last_b = len(a.frames) - 1, len(b.frames) - 1
    for i in range(depth):
        fa, fb = a.frames[i], b.frames[i]
        innermost = i == last_a or i == last_b
        ca, cb = dict(fa.counters), dict(fb.counters)
        if not (poll and innermost) and any(ca[k] != cb[k] for k in ca.keys() & cb.keys()):
            return True
        if not innermost and (fa.digest != fb.digest or fa.line != fb.line):
            return True
        if innermost and waiting and i == last_a == last_b and fa.digest != fb.digest:
            return True
    return False


def stepped(a: Point, b: Point) -> bool:
    """Did the rank's own loop move on between two of its points?"""
    if not (a.fresh and b.fresh):
        return False
    key = ("stepped", a.time)
    known = b.memo.get(key)
    if known is None:
        known = b.memo[key] = _stepped(a, b)
    return known


def _stepped(a: Point, b: Point) -> bool:
    waiting = _waits(a) and _waits(b)
    marked = a.loop is not None and b.loop is not None
    if marked and loop_moved(a.loop, b.loop, waiting, polling(a, b)):
        return True
    if marked and (a.counts or b.counts):
        return False          # its loop's counters stood: they are the loop's word
    # No counters (a loop at module level, counters in objects, an older bundle): the job's
    # frames stand in for the marks (the stack going round the loop), and a waiting rank that
    # woke up or moved bytes counts.
    if not marked and loop_moved(frames_mark(a.sig), frames_mark(b.sig), waiting):
        return True
    if went_round(a, b):
        return True
    # Woken and moving bytes together is a loop at work (a compute loop that never ends does
    # neither: it burns CPU and its sockets and pipes stay quiet); a waiting rank needs one of them,
    # and one spinning on a collective's Work at both (it never sleeps) the bytes its collectives move.
    if waiting:
        return moved_bytes(a, b) or woke(a, b)
    if a.reading.detail == WORK_WAIT and b.reading.detail == WORK_WAIT:
        return moved_bytes(a, b)
    return moved_bytes(a, b) and woke(a, b)


def _waits(point: Point) -> bool:
    """Parked in a wait whose innermost frame of the job's takes a new object each time the step comes
    back to it (a collective, its DataLoader, asleep). Not a spin on a collective's Work at the job's
    own line: there the line's locals (a generator expression's iterator, the next Work of the list)
    are new at every turn of the spin, and a spin burns the CPU rather than sleeping."""
    return point.reading.state in WAIT_STATES and point.reading.detail != WORK_WAIT


def woke(a: Point, b: Point) -> bool:
    """The main thread ran and went to sleep again between two points, beyond what the blocking
    stack reads cost: a rank that completed collectives or took batches. A blocking py-spy dump
    costs a parked thread 2 voluntary switches (measured), hence the margin; a thread blocked for
    good burns no CPU, and one that spins (NCCL's shape) is preempted, not put to sleep."""
    return (a.main is not None and b.main is not None and b.main.cpu_s - a.main.cpu_s > 0.02
            and b.main.voluntary_switches > a.main.voluntary_switches + WAKEUPS_PER_DUMP)


def counted(mark: LoopMark) -> bool:
    """Some frame of the job's code holds integer counters: its loop can be read."""
    return any(f.counters for f in mark.frames)


def went_round(a: Point, b: Point) -> bool:
    """The rank's own position moved between two points, with one of them in the step's own wait
    (a collective, its DataLoader): it left the wait, or reached it from elsewhere in its code.
    A rank blocked in a wait stands at one place; a spin's samples fall on frames of one line."""
    if a.reading.state not in STEP_WAITS and b.reading.state not in STEP_WAITS:
        return False
    if not (a.sig and b.sig) or a.sig == b.sig:
        return False
    return region(a.sig) != region(b.sig)


def region(frames: tuple[Frame, ...]) -> tuple[tuple[str, str, int], ...]:
    """Where the job's own code stands in a stack (innermost first): its frames as (function,
    file, line), outermost first, with a generator expression, lambda or comprehension running
    on its caller's line folded into the caller. The library code it called is left out: a spin
    (`while not all(w.is_completed() for w in work): pass`) is one place whichever frame, Python
    or C++, a sample caught."""
    hit = _REGIONS.get(id(frames))
    if hit is not None and hit[0] is frames:
        return hit[1]
    job = place(tuple(f for f in frames if f.is_job_code))
    key = tuple((f.name, f.filename, f.line) for f in reversed(job))
    if len(_REGIONS) >= 4096:
        _REGIONS.clear()
    _REGIONS[id(frames)] = (frames, key)
    return key


_REGIONS: dict[int, tuple[tuple[Frame, ...], tuple]] = {}


def same_place(a: Point, b: Point) -> bool:
    return bool(a.sig) and (a.sig == b.sig or place(a.sig) == place(b.sig))


def parked(point: Point) -> bool:
    """Asleep outside a training step's own waits: idle, or in a wait of its own line (a sleep, a
    select, a lock), not computing, not in a collective or the DataLoader."""
    return point.fresh and bool(point.sig) and point.reading.state not in _NOT_PARKED


def polling(a: Point, b: Point) -> bool:
    """Parked at the same place, frame for frame and line for line, at both points: in between,
    the rank at most went round a loop around that wait (see module doc)."""
    return parked(a) and parked(b) and a.sig == b.sig


@dataclass(frozen=True)
class PollLoop:
    """A rank going round a poll or retry loop: parked at one place since `since`, while the
    integers of its innermost frame (`counter`, its tries) moved from `tries[0]` to `tries[1]`."""

    since: float
    function: str                  # the job's innermost frame, whose loop it is
    counter: str
    tries: tuple[int, int]


def poll_loop(line: Timeline) -> PollLoop | None:
    """The poll loop a rank is in at its last sample (None: it is not in one, or nothing counts)."""
    last = line.last
    prev = next((p for p in itertools.islice(reversed(line.points), 1, None) if p.fresh), None)
    if prev is None or not polling(prev, last):
        return None
    since = line.run_start("polling", polling)
    first = line.points[bisect.bisect_left(line.points, since, key=lambda p: p.time)]
    a, b = first.loop, last.loop
    if a is None or b is None or not a.frames or not b.frames or a.frames[-1].function != b.frames[-1].function:
        return None
    before, after = dict(a.frames[-1].counters), dict(b.frames[-1].counters)
    counted = sorted(((abs(after[k] - before[k]), k) for k in before.keys() & after.keys() if after[k] != before[k]),
                     reverse=True)
    if not counted:
        return None
    name = counted[0][1]
    return PollLoop(since, b.frames[-1].function, name, (before[name], after[name]))


def frames_mark(frames: tuple[Frame, ...]) -> LoopMark:
    """A LoopMark from frames alone (innermost first): the job's frames and their lines."""
    hit = _MARKS.get(id(frames))
    if hit is not None and hit[0] is frames:
        return hit[1]
    mark = LoopMark(frames=tuple(FrameMark(f.name, f.line, "") for f in reversed(frames) if f.is_job_code))
    if len(_MARKS) >= 4096:
        _MARKS.clear()
    _MARKS[id(frames)] = (frames, mark)   # the frames are kept alive with it: the id stays theirs
    return mark


# Frame tuples are shared (interned) across samples: their marks are worked out once.
_MARKS: dict[int, tuple[tuple[Frame, ...], LoopMark]] = {}


SPIN_CPU_SHARE = 0.5      # of a core, between two samples at one line: a thread that spins there


def spins(a: Point, b: Point) -> bool:
    """Burned CPU at one line between two points with its loop counters still: computing, as its
    frames read, but on NCCL the shape of a host spinning at a sync while a collective sits on the
    GPU stream (what it waits on takes native frames to tell)."""
    if not (a.fresh and b.fresh and same_place(a, b)) or b.reading.state != RankState.COMPUTE:
        return False
    if a.cpu_s is None or b.cpu_s is None or b.time <= a.time or stepped(a, b):
        return False
    return (b.cpu_s - a.cpu_s) >= SPIN_CPU_SHARE * (b.time - a.time)


def dwells(points: list[Point]) -> bool:
    """Caught computing at one line in every one of `points` (fresh, in a row), burning CPU,
    whether or not it stepped between them: a fast loop that spends most of each step at one line.
    On NCCL that line is the host's sync (`.item()`) waiting on the collective queued on the GPU
    stream, or on its own GPU's work; the native frames and the GPU tell which."""
    if len(points) < 2 or not all(p.fresh for p in points):
        return False
    first, last = points[0], points[-1]
    if not first.sig or any(not same_place(first, p) or p.reading.state != RankState.COMPUTE for p in points):
        return False
    if first.cpu_s is None or last.cpu_s is None or last.time <= first.time:
        return False
    return (last.cpu_s - first.cpu_s) >= SPIN_CPU_SHARE * (last.time - first.time)


def held(a: Point, b: Point) -> bool:
    """Nothing of its own between two points: no step, no bytes, its main thread not woken again
    and again, and either a wait (a collective, its DataLoader, asleep) or the same place (a spin
    line) with its counters still."""
    if stepped(a, b) or moved_bytes(a, b) or woke(a, b) or receiving(a, b):
        return False
    return b.reading.state in WAIT_STATES or same_place(a, b)


def held_since(line: Timeline, workers: list[Timeline]) -> float | None:
    """Since when the rank and its live workers did nothing of their own (see `held`); None when
    the rank is not held at its last sample."""
    fresh = [p for p in line.points if p.fresh]
    if len(fresh) < 2 or not held(fresh[-2], fresh[-1]):
        return None
    own = line.run_start("held", held)
    return max([own, *(w.unmoved_since() for w in workers if w.points)])


def working(a: Point, b: Point) -> bool:
    """Busy with I/O of its own: a rank writing a checkpoint or reading a file moves bytes; one
    sleeping in a socket read receives data (a download, a remote service answering)."""
    return (b.reading.state == RankState.IO and moved_bytes(a, b)) or receiving(a, b)


def blocked_since(line: Timeline) -> float | None:
    """Start of the trailing run in which the rank sat in one collective without stepping."""
    if line.last.reading.state != RankState.COLLECTIVE:
        return None
    return line.run_start("blocked", lambda a, b: a.reading.state == RankState.COLLECTIVE
                          and a.reading.detail == b.reading.detail and not stepped(a, b))


def step_times(line: Timeline) -> list[float]:
    """When the rank stepped, as seen: the midpoint of the two samples around each step."""
    fresh = [p for p in line.points if p.fresh]
    return [(a.time + b.time) / 2 for a, b in zip(fresh, fresh[1:]) if stepped(a, b)]


def rank_progress(line: Timeline, workers: list[Timeline] = (), setup_end: float | None = None) -> StepSummary:
    """What a rank's timeline says about its rhythm, in a few numbers (see StepSummary); `workers`:
    its live DataLoader workers' timelines, whose reads are its data moving."""
    steps: list[float] = []
    last_sign = None
    has_locals = any(p.loop is not None and counted(p.loop) for p in line.points)
    prev = None
    for point in line.points:
        if not point.fresh:
            continue
        if prev is not None:
            if stepped(prev, point):
                steps.append((prev.time + point.time) / 2)
                last_sign = point.time
            elif working(prev, point):
                last_sign = point.time
        prev = point
    # What moved before the rank got through process-group setup was its start-up (imports, the
    # rendezvous), not its rhythm: a restarted start learns its own from its steps after. `setup_end`:
    # the last point any rank of its start was seen in setup (a rank that got through between two
    # samples was never seen there, but it cannot have stepped before its peers joined).
    setup = max((t for t in (started_up(line), setup_end) if t is not None), default=None)
    if setup is not None:
        steps = [t for t in steps if t > setup]
    gaps = [b - a for a, b in zip(steps, steps[1:])]
    steady = gaps[STARTUP_GAPS:] or gaps      # the start-up's gap alone still bounds the rhythm
    return StepSummary(len(steps), max(steady) if steady else None, last_sign, has_locals,
                       data_sign(workers) if workers else None, gpu_sign(line))


def started_up(line: Timeline) -> float | None:
    """The last point at which the rank was in process-group setup (init_process_group, the
    rendezvous, the store): its start-up ended after it. None: never seen there."""
    points = line.points
    i = len(points) - 1
    while i > 0 and "setup" not in points[i].memo:
        i -= 1
    last = points[i].memo.get("setup")
    for point in points[i:]:
        if point.fresh and joining(point) is not None:
            last = point.time
        point.memo["setup"] = last
    return last


def gpu_sign(line: Timeline) -> float | None:
    """The last point at which the rank's GPU had been at work since the point before (busy at both:
    kernels with memory traffic and power; a spin or an idle GPU is no sign).

    A watch asks every round: the answer travels with the last point worked out (its memo), so a
    round costs its new points, on a job with no GPU reading too."""
    points = line.points
    i = len(points) - 1
    while i > 0 and "gpu" not in points[i].memo:
        i -= 1
    last = points[i].memo.setdefault("gpu", None)
    for a, b in zip(points[i:], points[i + 1:]):
        if a.gpu is GpuActivity.BUSY and b.gpu is GpuActivity.BUSY:
            last = b.time
        b.memo["gpu"] = last
    return last


def data_sign(workers: list[Timeline]) -> float | None:
    """The last point at which one of a rank's live DataLoader workers' data moved on: it read new
    ground (past the furthest offset it had reached in a file), or read forward after a rewind to a
    new place (random access into a compressed stream: each backward seek decompresses from the
    file's start, to the next sample's member). A worker whose passes end at the same place again
    and again rewinds for ever: no sign (`analyze/passes.py`)."""
    signs = [t for line in workers if (t := reading_on(line)) is not None]
    return max(signs) if signs else None


def new_ground(line: Timeline) -> tuple[int, float | None]:
    """The bytes a process read past the furthest offset it had reached in each file it holds
    open, over its timeline, and the last point at which it did (None: never).

    A watch asks every round: the furthest offsets travel with the last point worked out (its
    memo), so a round costs its new points, not the whole history."""
    points = line.points
    i = len(points) - 1
    while i > 0 and "ground" not in points[i].memo:
        i -= 1
    furthest, total, last = ({}, 0, None)
    if "ground" in points[i].memo:
        known, total, last = points[i].memo["ground"]
        furthest = dict(known)
        i += 1
    for point in points[i:]:
        if point.reads is not None:
            gained = 0
            for fd, path, pos in point.reads:
                key = (fd, path)
                reached = furthest.get(key)
                if reached is None or pos > reached:
                    furthest[key] = pos
                    gained += pos - reached if reached is not None else 0
            if gained > IO_NOISE_BYTES:
                total, last = total + gained, point.time
        point.memo["ground"] = (furthest, total, last)
    return total, last


@dataclass(frozen=True)
class Rhythm:
    """The threshold and where it came from: "given" (--hang-after), "learned" or "default"."""

    source: str
    threshold_s: float
    longest_step_s: float | None    # the longest gap between two steps of one rank
    steps_seen: int
    quiet_since: float              # the last sign of progress (or the first sample)
    has_locals: bool
    stepped_since: float | None = None   # the last step or I/O of a rank's own (quiet_since without the data)
    data_since: float | None = None      # the last time data or a GPU moved, when after the last step
    moved_by: str | None = None          # which: "data" (workers reading new ground) or "gpu" (a GPU at work)
    start: int = 0                       # the start of the ranks it was learned from (torchrun's restart count)


def rhythm(progress: list[StepSummary], first: float, hang_after: float | None,
           collective_steps: list[float] = ()) -> Rhythm:
    """The job's rhythm from its ranks' step summaries (the first sample's time bounds the quiet).
    `collective_steps`: times at which the job's own collective record (Flight Recorder) showed
    a rank completing collectives; they count as signs of progress too. Every figure is a max or
    a sum over ranks, so the ranks of thousands of nodes fold in any order."""
    gaps = [p.longest_gap_s for p in progress if p.longest_gap_s is not None]
    signs = [p.last_sign for p in progress if p.last_sign is not None] + list(collective_steps)
    stepped_since = max(signs) if signs else first
    # Data or a GPU moving after the last step; a bound the user gave holds all the same (module doc).
    moving = [(s, what) for p in progress for s, what in ((p.data_sign, "data"), (p.gpu_sign, "gpu"))
              if s is not None and s > stepped_since] if hang_after is None else []
    data_since, moved_by = max(moving) if moving else (None, None)
    quiet_since = data_since or stepped_since
    longest = round(max(gaps), 2) if gaps else None
    if hang_after is not None:
        source, threshold = "given", hang_after
    elif longest is not None:
        source, threshold = "learned", max(HANG_FLOOR_S, STEP_MULTIPLE * longest)
    else:
        source, threshold = "default", DEFAULT_HANG_AFTER_S
    return Rhythm(source, round(threshold, 1), longest, sum(p.steps for p in progress),
                  quiet_since, any(p.has_locals for p in progress), stepped_since, data_since, moved_by)


def progress_word(line: Timeline, worker_lines: list[Timeline]) -> Progress:
    """"active" (it stepped at the last sample), "slow" (no step, but it or its workers are busy:
    CPU, bytes, frames), "stuck" (nothing)."""
    fresh = [p for p in line.points if p.fresh]
    if len(fresh) < 2:
        return Progress.ACTIVE
    prev, last = fresh[-2], fresh[-1]
    if stepped(prev, last):
        return Progress.ACTIVE
    if any(len(w.points) >= 2 and moved(w.points[-2], w.last) for w in worker_lines):
        return Progress.SLOW
    if receiving(prev, last):
        return Progress.SLOW       # parked in a socket read, data arriving: a download, not a poll
    if polling(prev, last):
        return Progress.STUCK      # what CPU it used went into polling
    if prev.sig != last.sig or moved(prev, last):
        return Progress.SLOW
    return Progress.STUCK
