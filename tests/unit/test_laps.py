"""A DataLoader worker that rewinds for ever, told by its bytes: between two samples the process reads
(rchar) the bytes its offset moved plus the end of every pass the samples missed, so a worker that
reads one lap of a file again and again reads whole numbers of that lap, to the byte; random access
reads sums of ends anywhere. And a wait on the data between bursts of batches is the straggler's
cost, not a pause of the job."""
from __future__ import annotations

import random

from hangdoc.analyze.passes import LAPS, file_reads
from hangdoc.analyze.shares import job_pauses
from hangdoc.analyze.timeline import Peers, Point, Timeline
from hangdoc.model import RankState
from hangdoc.analyze.classify import Reading

T0 = 1000.0
SHARD = "/data/libri000.tar.bz2"
SIZE = 55_130_241
LAP = 20_856_832            # a real rewinder's pass: the file's start to the record it reads again


def worker_line(ends, reads_per_sample, samples: int, seed: int = 0, jitter: int = 8192, size: int = SIZE,
                rchar_moves: bool = True) -> Timeline:
    """A worker sampled every 2 s for `samples` samples, reading `reads_per_sample()` bytes between two
    samples: forward to the end its pass is after (`ends()`, drawn anew at each rewind), then back to
    the file's start. rchar counts every byte read, read a moment apart from the offset (up to
    `jitter` bytes either way); `rchar_moves=False`: a counter that does not follow the reads."""
    rng = random.Random(seed)
    pos, total, end, points = 0, 0, ends(), []
    for i in range(samples):
        budget = reads_per_sample()
        while budget > 0:
            step = min(budget, end - pos)
            pos, total, budget = pos + step, total + step, budget - step
            if pos >= end:
                pos, end = 0, ends()
        rchar = total + rng.choice((-jitter, 0, jitter)) if rchar_moves else 1000
        points.append(Point(T0 + 2.0 * i, Reading(RankState.COMPUTE, None, None), (), float(i), None,
                            reads=((7, SHARD, pos),), sizes=(size,), rchar=max(0, rchar)))
    return Timeline(201, tuple(points))


def looping(line: Timeline) -> bool:
    files, _ = file_reads(line)
    return files[7, SHARD].looping


def test_a_worker_reading_one_lap_again_and_again_is_told_by_its_bytes_within_seconds():
    # GIVEN a worker rereading the same record of a bz2 shard, one to three passes between two samples
    rng = random.Random(1)
    line = worker_line(lambda: LAP, lambda: rng.randint(15_000_000, 60_000_000), samples=14)
    # WHEN its reads are worked out
    files, moved_on = file_reads(line)
    read = files[7, SHARD]
    # THEN it loops: LAPS passes or more, every excess a whole number of the lap, and its data last moved
    # on before the first of them
    assert read.looping and read.lap is not None and abs(read.lap - LAP) <= 8192
    assert sum(round(x / read.lap) for _, x, _ in read.laps) >= LAPS
    assert moved_on is not None and moved_on <= T0 + 2.0


def test_random_access_over_the_shard_never_loops():
    # GIVEN workers reading members of a shuffled batch by random access (each pass to a new member's
    # end anywhere in the first 50 MB), at the same rates, over several seeds and 150 samples each
    for seed in range(20):
        rng = random.Random(seed)
        line = worker_line(lambda: rng.randint(1_000_000, 50_000_000), lambda: rng.randint(15_000_000, 60_000_000),
                           samples=150, seed=seed)
        # WHEN their reads are worked out THEN none loops, and the data moves on to the last samples
        files, moved_on = file_reads(line)
        assert not files[7, SHARD].looping, seed
        assert moved_on is not None and moved_on >= T0 + 2.0 * 140, seed


def test_a_samples_members_ending_in_one_compressed_block_are_no_loop():
    # GIVEN random access whose samples each hold up to four members in one bz2 block: the same end
    # up to four times in a row (a wav, its transcript, ...), then another sample's
    for seed in range(20):
        rng = random.Random(seed)
        queue: list[int] = []

        def ends() -> int:
            if not queue:
                queue.extend([rng.randint(1_000_000, 50_000_000)] * rng.randint(1, 4))
            return queue.pop()
        line = worker_line(ends, lambda: rng.randint(15_000_000, 60_000_000), samples=150, seed=seed)
        # WHEN worked out THEN no loop
        assert not looping(line), seed


def test_a_file_read_whole_again_and_again_is_a_reader_starting_over_not_a_loop():
    # GIVEN a worker that reads a whole small file for every sample (an index reread each time)
    rng = random.Random(3)
    line = worker_line(lambda: 8_000_000, lambda: rng.randint(9_000_000, 30_000_000), samples=40, size=8_000_000)
    # WHEN worked out THEN its laps reach the file's end: no loop
    assert not looping(line)


def test_a_byte_counter_that_does_not_follow_the_offset_tells_nothing():
    # GIVEN the rewinder's offsets, its rchar never moving (a counter not of these reads)
    rng = random.Random(4)
    line = worker_line(lambda: LAP, lambda: rng.randint(15_000_000, 60_000_000), samples=40, rchar_moves=False)
    # WHEN worked out THEN no laps are laid on the file, and no loop is called from them
    files, _ = file_reads(line)
    assert not files[7, SHARD].looping and len(files[7, SHARD].laps) <= 1


def bursts(late: str, monkeypatch) -> list[tuple[float, float]]:
    """The job's pauses for two ranks stepping in bursts (prefetched batches: 4 steps 2 s apart), then
    40 s without a step, five times over: rank 0 waits in all_reduce through each long stretch, rank 1
    spends it in `late`."""
    import hangdoc.analyze.shares as shares
    steps = sorted(start + j for start in range(0, 120, 24) for j in range(4))
    monkeypatch.setattr(shares, "step_times", lambda line: [T0 + 2.0 * i for i in steps])
    peers = Peers()
    for pid, waiting in ((100, RankState.COLLECTIVE), (101, late)):
        states = ([RankState.COMPUTE] * 4 + [waiting] * 20) * 5
        line = Timeline(pid, tuple(Point(T0 + 2.0 * i, Reading(state, None, None), (), float(i), None)
                                   for i, state in enumerate(states)), peers)
        peers.lines.append(line)
    return job_pauses(peers.lines[-1])


def test_a_wait_on_the_data_between_bursts_of_batches_is_no_pause(monkeypatch):
    # GIVEN rank 1 waiting on its DataLoader through each long stretch (its workers are late)
    # WHEN the job's pauses are worked out
    pauses = bursts(RankState.DATALOADER, monkeypatch)
    # THEN none: the data kept the job, as it keeps every burst: the straggler's cost, in its shares
    assert pauses == []


def test_an_evaluation_on_one_rank_is_still_a_pause(monkeypatch):
    # GIVEN rank 1 computing through each long stretch (an evaluation) while rank 0 waits
    # WHEN the job's pauses are worked out
    pauses = bursts(RankState.COMPUTE, monkeypatch)
    # THEN the long stretches are pauses, left out of the shares
    assert len(pauses) >= 4


def test_a_pipe_read_beside_a_file_moving_forward_is_no_lap():
    # GIVEN a worker reading its shard forward 1 MB a sample while it takes 3 MB a sample from a pipe
    # (a remote fetch), every sample: an excess of 3 MB at each, the same every time
    points = [Point(T0 + 2.0 * i, Reading(RankState.COMPUTE, None, None), (), float(i), None,
                    reads=((7, SHARD, (i + 1) << 20),), sizes=(SIZE,), rchar=(i + 1) << 22) for i in range(40)]
    # WHEN worked out THEN no loop: a pass from the file's start ends past where the file stood
    files, moved_on = file_reads(Timeline(201, tuple(points)))
    assert not files[7, SHARD].looping and moved_on == points[-1].time


def test_fixed_size_records_read_by_seeking_about_a_plain_file_are_no_loop():
    # GIVEN a worker reading 512 KB records of a plain file by seek and read, at random offsets, 40 a
    # sample: every excess a whole number of the record's size
    rng = random.Random(5)
    record, total, points = 512 << 10, 0, []
    for i in range(60):
        pos = 0
        for _ in range(40):
            pos = rng.randrange(0, SIZE // record) * record + record
            total += record
        points.append(Point(T0 + 2.0 * i, Reading(RankState.COMPUTE, None, None), (), float(i), None,
                            reads=((7, SHARD, pos),), sizes=(SIZE,), rchar=total))
    # WHEN worked out THEN no loop: the excesses fall short of where the file stood, past the lap
    assert not looping(Timeline(201, tuple(points)))
