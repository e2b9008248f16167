"""A DataLoader worker's reads through its files, pass by pass: does its data move on? Pure.

A worker reading a compressed file by random access goes back (a backward seek in a bz2, gzip
or xz stream decompresses again from the file's start) and reads forward to the member it needs:
a *pass*, from one rewind to the next. A worker that moves on ends its passes at new places (a
new member each time: the samples of its next batch); one that rewinds for ever ends them at the
same place again and again (a retry of one record, a loop that never gets past it): no new data,
however many bytes it decompresses. Reading forward is the data moving (`reading_on`) unless the
file's last passes all ended at one place, within what one sample's reading spans; new ground
(past the furthest offset reached) always is. How many passes: REPEATS where their ends fall within
a small part of the file; where they spread over much of it (a fast worker, a small file, sampled
ends anywhere in the last sample's reading), random places over the file (a shuffled batch's
members) fall so close often, and it takes as many passes as they would seldom give; where they
spread over the file, the samples cannot tell a rewind from random access.

The bytes tell it sooner (`laps`): between two points the process read (rchar) the bytes its offset
moved, plus, for each rewind between them, the pass that ended there, so its excess is the sum of the
ends of the passes the samples missed. A worker that rewinds for ever reads the same lap again and
again: every excess a whole number of one lap, to the byte, where random access gives sums of ends
anywhere. LAPS passes at least (a sample's members end in one compressed block, a few passes alike),
over as many points as random sums would seldom fit, short of the file's end (a file read whole
again and again is a reader starting over, not one stuck in it).
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from functools import cached_property

from hangdoc.analyze.timeline import IO_NOISE_BYTES, Timeline

REPEATS = 4     # passes in a row ending at one place: a worker that rewinds for ever
CHANCE = 0.001  # how seldom random places over a file may end that many passes within one span
MOST = 32       # more passes than this are never asked: the span is too much of the file to tell
# Bytes an excess may be off a whole number of laps: rchar and the offset are read a moment apart, so
# a read of up to this much may fall between them at either point (and the index queue's pickles).
LAP_NOISE = 16 * IO_NOISE_BYTES
LAP_MIN = 2 * LAP_NOISE         # an excess of bytes read below this is no pass
LAPS = 16       # passes of one lap at least: more than a sample's members ending in one compressed block


@dataclass(frozen=True)
class FileReads:
    """One file a process reads, over its timeline: where it stands, how it got there."""

    fd: int
    path: str
    pos: int                          # its offset at the last point
    furthest: int                     # the furthest offset it reached
    forward_bytes: int = 0            # read forward, what it read again after a rewind included
    reading_s: float = 0.0            # the time over which it was read forward (between points that read it)
    rewinds: int = 0                  # backward seeks seen (each one a new pass)
    top: int = 0                      # the furthest offset of the pass under way
    step: int = 0                     # its largest step between two points
    began: float | None = None        # the file's last forward read before the pass under way began
    forward_at: float | None = None   # the last point at which it was read forward
    ground_at: float | None = None    # the last point at which it was read past the furthest offset before
    # The passes in a row, the last one finished included, that ended at one place: how many, where
    # (lowest and highest end), their largest step, and the file's last forward read before the first began.
    alike: int = 0
    ends: tuple[int, int] = (0, 0)
    alike_step: int = 0
    alike_began: float | None = None
    # The bytes: the process's rchar at the file's last point, the file's size, and the run of laps:
    # each interval (newest last) whose excess is a whole number of one lap, as (the point before
    # it, its excess, the furthest offset at its two points).
    rchar: int | None = None
    size: int | None = None
    laps: tuple[tuple[float, int, int], ...] = ()

    @property
    def laps_began(self) -> float | None:
        """The point before the first interval of its run of laps: its data moved on last before it."""
        return self.laps[0][0] if self.laps else None

    @property
    def lap(self) -> int | None:
        """The bytes of one pass of its repeated laps (`lap_of`)."""
        return lap_of(tuple(x for _, x, _ in self.laps))

    @cached_property
    def lapping(self) -> tuple[int, int | None]:
        """The passes its run of laps holds, and how many points of them random ends would seldom
        fit as well (None: the lap reaches the file's end, or too much of it to tell, or the file
        was read past it: a loop from the file's start never goes past its lap)."""
        lap = self.lap
        if lap is None or (self.size is not None and lap >= self.size - LAP_NOISE) \
                or max(top for _, _, top in self.laps) > lap + LAP_NOISE:
            return 0, None
        passes = sum(round(x / lap) for _, x, _ in self.laps)
        share = min(1.0, 2 * LAP_NOISE / lap)
        points = next((k for k in range(3, MOST + 1) if k * share ** (k - 1) <= CHANCE), None)
        return passes, points

    @property
    def looping(self) -> bool:
        """It reads one lap of the file again and again, by its bytes: a rewind for ever."""
        passes, points = self.lapping
        return points is not None and passes >= LAPS and len(self.laps) >= points

    def since(self, start: float) -> "FileReads":
        """Its run of laps from `start` on: what the samples from `start` show (a watch's history
        whose oldest samples were dropped)."""
        if not self.laps or self.laps[0][0] >= start:
            return self
        return dataclasses.replace(self, laps=tuple(lap for lap in self.laps if lap[0] >= start))

    @property
    def converging(self) -> bool:
        """Its bytes fit one lap over several points, not yet enough passes to call it a rewind for
        ever: whether its data moves on is not told yet."""
        passes, points = self.lapping
        return points is not None and len(self.laps) >= 3 and not self.looping

    @property
    def repeating(self) -> bool:
        """Its last passes ended at one place (within their largest step), as many as random places
        would seldom give as close together (`passes_needed`): it rewinds for ever."""
        needed = passes_needed(self.ends[1] - self.ends[0] + IO_NOISE_BYTES, self.furthest)
        return (needed is not None and self.alike >= needed) or self.looping

    @property
    def moved_on(self) -> float | None:
        """The last point at which its data moved on: new ground, or a forward read, unless it rewinds
        for ever (then its last forward read before the first of the repeated passes began)."""
        if self.looping:      # ground it seemed to gain since is its samples catching the lap's end closer
            return self.laps_began
        forward = self.alike_began if self.repeating else self.forward_at
        known = [t for t in (forward, self.ground_at) if t is not None]
        return max(known) if known else None

    @property
    def rate(self) -> float | None:
        """Bytes read forward a second, over the time it was read."""
        return self.forward_bytes / self.reading_s if self.reading_s > 0 else None


def passes_needed(span: int, reached: int) -> int | None:
    """How many passes in a row ending within `span` bytes of each other make a rewind for ever, on a
    file read as far as `reached`: the fewest, from REPEATS on, that k places drawn at random over the
    file would give under CHANCE (about k * share ** (k - 1), share the span's part of the file);
    None where no count up to MOST would."""
    share = min(1.0, span / reached) if reached > 0 else 1.0
    return next((k for k in range(REPEATS, MOST + 1) if k * share ** (k - 1) <= CHANCE), None)


def file_reads(line: Timeline) -> tuple[dict[tuple[int, str], FileReads], float | None]:
    """Each file the process reads ((fd, path) -> FileReads) and the last point at which its data
    moved on in one of them (see module doc; None: never).

    A watch asks every round: the state travels with the last point worked out (its memo), so a
    round costs its new points, not the whole history."""
    points = line.points
    i = len(points) - 1
    while i > 0 and "passes" not in points[i].memo:
        i -= 1
    files: dict[tuple[int, str], FileReads] = {}
    before = None
    if "passes" in points[i].memo:
        known, before = points[i].memo["passes"]
        files = {key: read.since(points[0].time) for key, read in known.items()}
        i += 1
    for point in points[i:]:
        if point.reads is not None:
            span = point.time - before if before is not None else 0.0
            moved = [key for fd, path, pos in point.reads
                     if (was := files.get(key := (fd, path))) is None or abs(pos - was.pos) > IO_NOISE_BYTES]
            sizes = point.sizes or (None,) * len(point.reads)
            for (fd, path, pos), size in zip(point.reads, sizes):
                was = files.get((fd, path))
                if was is None:
                    files[fd, path] = FileReads(fd, path, pos, pos, top=pos, rchar=point.rchar, size=size)
                    continue
                read = _read(was, pos, span, point.time)
                alone = moved == [(fd, path)] or not moved
                files[fd, path] = _lapped(read, was, point.rchar if alone else None, size, before)
            before = point.time
        point.memo["passes"] = (files, before)
    signs = [t for f in files.values() if (t := f.moved_on) is not None]
    return files, max(signs) if signs else None


def _read(was: FileReads, pos: int, span: float, now: float) -> FileReads:
    """The file's reads after one more point, at offset `pos`, `span` seconds after the one before."""
    if pos > was.pos + IO_NOISE_BYTES:
        gained = pos - was.pos
        ground = now if pos > was.furthest + IO_NOISE_BYTES else was.ground_at
        return dataclasses.replace(was, pos=pos, furthest=max(was.furthest, pos),
                                   forward_bytes=was.forward_bytes + gained, reading_s=was.reading_s + span,
                                   top=max(was.top, pos), step=max(was.step, gained), forward_at=now,
                                   ground_at=ground)
    if pos < was.pos - IO_NOISE_BYTES:
        low, high = min(was.ends[0], was.top), max(was.ends[1], was.top)
        step = max(was.alike_step, was.step)
        if was.alike and high - low <= step + IO_NOISE_BYTES:
            alike = dict(alike=was.alike + 1, ends=(low, high), alike_step=step)
        else:
            alike = dict(alike=1, ends=(was.top, was.top), alike_step=was.step, alike_began=was.began)
        return dataclasses.replace(was, pos=pos, rewinds=was.rewinds + 1, top=pos, step=0, began=was.forward_at,
                                   **alike)
    return dataclasses.replace(was, pos=pos)


def _lapped(read: FileReads, was: FileReads, rchar: int | None, size: int | None,
            before: float | None) -> FileReads:
    """`read` with its run of laps after one more point: the bytes the process read since `was` beyond
    the file's own move are the ends of the passes between (`rchar`: None where another file moved
    too, or it was not read, and the bytes cannot be laid on this one). A pass from the file's start
    that was under way at `was` ended past where it stood: an excess short of that is other reads
    (a pipe, a file opened and closed between), or a seek back to elsewhere than the start."""
    if rchar is None or was.rchar is None:
        return dataclasses.replace(read, rchar=rchar, size=size, laps=())
    excess = (rchar - was.rchar) - (read.pos - was.pos)
    if excess < -LAP_NOISE:         # its offset moved further than it read: the counter tells nothing of it
        return dataclasses.replace(read, rchar=rchar, size=size, laps=())
    if excess < LAP_MIN:
        return dataclasses.replace(read, rchar=rchar, size=size)      # no pass ended between: nothing told
    if abs(read.pos - was.pos) <= IO_NOISE_BYTES or excess < was.pos - LAP_NOISE:
        return dataclasses.replace(read, rchar=rchar, size=size, laps=())
    lapped = (before, excess, max(was.pos, read.pos))
    laps = read.laps + (lapped,)
    lap = lap_of(tuple(x for _, x, _ in laps))
    if all(abs(x - round(x / lap) * lap) <= LAP_NOISE for _, x, _ in laps):
        return dataclasses.replace(read, rchar=rchar, size=size, laps=laps[-4 * MOST:])
    return dataclasses.replace(read, rchar=rchar, size=size, laps=(lapped,))


def lap_of(laps: tuple[int, ...]) -> int | None:
    """One lap's bytes from excesses that are whole numbers of it: the median of each over its
    number of laps (counted against the smallest), so that the noise of one reading (LAP_NOISE)
    is not multiplied by the laps of the others."""
    if not laps:
        return None
    least = min(laps)
    return round(statistics.median(x / max(1, round(x / least)) for x in laps))


def reading_on(line: Timeline) -> float | None:
    """The last point at which the process's data moved on in a file it reads."""
    return file_reads(line)[1]
