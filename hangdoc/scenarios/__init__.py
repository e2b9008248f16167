"""The scenario zoo: real torchrun + gloo jobs on CPU that reproduce the field's failures.

Each `Scenario` carries its ground truth (verdict, culprit ranks, the rule that should fire),
writes its own data (`prepare`) and builds its torchrun command (`command`). The training
program is `train.py`; `launch.py` starts, waits for and ends jobs.

    scenario = SCENARIOS["bz2-shards"]
    scenario.prepare(workdir)
    job = start_job(scenario.command(workdir), log_path=workdir / "job.log")
    wait_for(scenario.fault_marker(workdir), job, timeout=20)
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hangdoc.scenarios.data import make_clip_files, make_shards, write_list
from hangdoc.scenarios.launch import torchrun_cmd

TRAIN_SCRIPT = Path(__file__).with_name("train.py")
RHYTHM_SCRIPT = Path(__file__).with_name("rhythm.py")
FILES_SCRIPT = Path(__file__).with_name("files.py")
SPIN_SCRIPT = Path(__file__).with_name("spin.py")
VERDICTS = ("hang", "healthy", "crash", "slow")


def _plain(n_shards: int, clips: int = 32) -> Callable[[Path], list[Path]]:
    """Shards of 1 s clips in plain tar (an AISHELL-like corpus)."""
    def layout(data: Path) -> list[Path]:
        return make_shards(data, n_shards, clips, 1.0, prefix="aishell")
    return layout


def _mixed(slow: Callable[[Path], list[Path]], clips: int = 160) -> Callable[[Path], list[Path]]:
    """Six plain shards mixed with two `slow` ones, placed where rank 1's workers draw them.

    Shard i goes to rank i % 2, worker (i // 2) % 2: each of rank 1's workers first reads a
    plain shard (so training runs healthy for a while and its rhythm can be seen), then a
    slow one; rank 0 reads plain shards only.
    """
    def layout(data: Path) -> list[Path]:
        a = make_shards(data, 6, clips, 1.0, prefix="aishell")
        b = slow(data)
        return [a[0], a[1], a[2], a[3], a[4], b[0], a[5], b[1]]
    return layout


def _bz2_long_clips(data: Path) -> list[Path]:
    """A LibriSpeech-like corpus in .tar.bz2: 320 x 12 s clips, 123 MB decompressed per shard."""
    return make_shards(data, 2, 320, 12.0, "bz2", prefix="libri", distinct_clips=4)


def _bz2_long_on_rank_1(data: Path) -> list[Path]:
    """Short clips in plain tar for rank 0, 30 s clips in .tar.bz2 for rank 1 (shard i goes to rank
    i % 2, worker (i // 2) % 2): AISHELL mixed with a LibriSpeech packed by another team."""
    plain = make_shards(data, 2, 64, 1.0, prefix="aishell")
    bz2 = make_shards(data, 2, 24, 30.0, "bz2", prefix="libri", distinct_clips=3)
    return [plain[0], bz2[0], plain[1], bz2[1]]


def _clip_files(data: Path) -> list[Path]:
    """A raw corpus: 480 short clips (1-3 s), one WAV file each, listed one path a line."""
    return make_clip_files(data, 480, (1.0, 3.0), prefix="utt")


def _bz2_per_channel(data: Path) -> list[Path]:
    """A two-microphone corpus in .tar.bz2, one member per channel, packed channel-major."""
    return make_shards(data, 2, 250, 4.0, "bz2", prefix="chime", distinct_clips=4, channels=2)


@dataclass(frozen=True)
class Scenario:
    """One reproducible job and the answer a diagnosis of it must give."""

    name: str
    description: str
    verdict: str                        # "hang" | "healthy" | "crash" | "slow"
    culprit_ranks: tuple[int, ...]
    expected_rule: str | None
    nproc: int = 2
    num_workers: int = 2
    batch_size: int = 4
    max_steps: int | None = None        # default run length; None: until killed (or it crashes)
    layout: Callable[[Path], list[Path]] = field(default=_plain(8), repr=False, compare=False)
    script: Path = field(default=TRAIN_SCRIPT, repr=False, compare=False)   # the program torchrun runs
    env: tuple[str, ...] = ()           # "NAME=value" for the job ("{workdir}" is replaced), via env(1)
    # Its ground truth is told only from a GPU reading (a host spinning at .item() waits or works as
    # its GPU does): on CPU, with no NVML, hangdoc cannot see it, and says so instead of guessing.
    needs_gpu: bool = False
    # The verdict under a plain watch (no --hang-after), where it is not `verdict` (the verdict at a
    # short --hang-after): a batch whose data moves on is slow until a bound given calls it hung.
    watched: str | None = None

    def truth(self, hang_after: float | None) -> str:
        """The verdict a watch with this --hang-after (None: none given) must give."""
        return self.watched if hang_after is None and self.watched else self.verdict

    def prepare(self, workdir: str | Path) -> Path:
        """Write the scenario's shards under `workdir/data` and the list `workdir/data.list`."""
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        for stale in [self.fault_marker(workdir), *self.ready_markers(workdir)]:
            stale.unlink(missing_ok=True)
        return write_list(self.layout(workdir / "data"), workdir / "data.list")

    def command(self, workdir: str | Path, python: str | None = None,
                max_steps: int | None = None) -> list[str]:
        """The torchrun command line; `max_steps` overrides the scenario's default run length."""
        steps = max_steps if max_steps is not None else self.max_steps
        args = ["--scenario", self.name, "--workdir", str(Path(workdir).resolve()),
                "--data-list", str(Path(workdir).resolve() / "data.list"),
                "--num-workers", str(self.num_workers), "--batch-size", str(self.batch_size)]
        if steps is not None:
            args += ["--max-steps", str(steps)]
        cmd = torchrun_cmd(self.script, *args, nproc=self.nproc, python=python or sys.executable)
        if self.env:     # env(1) execs the launcher: its pid is still the one hangdoc attaches to
            cmd = ["env", *(v.replace("{workdir}", str(Path(workdir).resolve())) for v in self.env), *cmd]
        return cmd

    def fault_marker(self, workdir: str | Path) -> Path:
        return Path(workdir) / "fault"

    def ready_markers(self, workdir: str | Path) -> list[Path]:
        return [Path(workdir) / f"ready.{rank}" for rank in range(self.nproc)]

    def read_fault(self, workdir: str | Path) -> dict | None:
        """The fault record ({"time", "rank", "pid", "what"}), or None before the fault."""
        try:
            return json.loads(self.fault_marker(workdir).read_text())
        except FileNotFoundError:
            return None


_ALL = [
    Scenario("bz2-shards",
             "rank 1 draws .tar.bz2 shards read by random access; its workers decompress for minutes",
             "hang", (1,), "slow-decompression", batch_size=16,
             layout=_mixed(_bz2_long_clips), watched="slow"),
    Scenario("bz2-straggler",
             "rank 1 reads .tar.bz2 shards of 30 s clips in order: its workers deliver steadily but late, "
             "rank 0 waits in the gradient all_reduce most of each step; slow, never a hang",
             "slow", (1,), "slow-decompression", batch_size=16, max_steps=40, layout=_bz2_long_on_rank_1),
    Scenario("tar-stream-decode",
             "rank 1 decodes per-channel audio straight from bz2 tar member files; every read seeks",
             "hang", (1,), "tar-member-decode",
             layout=_mixed(_bz2_per_channel)),
    Scenario("uneven-shards",
             "5 shards over 2 ranks x 2 workers: rank 1 runs out first and waits in the epoch barrier",
             "hang", (1,), "uneven-shards", layout=_plain(5, clips=96)),
    Scenario("worker-segfault",
             "a rank-1 DataLoader worker segfaults after 3 batches; the job crashes",
             "crash", (1,), "worker-died"),
    Scenario("worker-deadlock",
             "rank 1's workers fork while a stats thread holds a lock, then block on it forever",
             "hang", (1,), "worker-deadlock"),
    Scenario("compute-straggler",
             "rank 1 loops forever in heavy_compute(); rank 0 waits in the gradient all_reduce",
             "hang", (1,), "collective-straggler"),
    Scenario("fr-straggler",
             "compute-straggler with the Flight Recorder on: both ranks dump it when the fault begins",
             "hang", (1,), "flight-recorder",
             env=("TORCH_FR_BUFFER_SIZE=2000", "TORCH_FR_DUMP_TEMP_FILE={workdir}/fr_trace_rank_")),
    Scenario("slow-data",
             "one worker per rank and a CPU-heavy augmentation: starved, a step every ~0.6 s; slow, data-bound",
             "slow", (), "gpu-starved", num_workers=1, max_steps=45),
    Scenario("tiny-files",
             "a file per 1-3 s clip on a network file system (25 ms an open), DataLoader defaults: "
             "both ranks wait on their workers most of each step; slow, data-bound",
             "slow", (), "gpu-starved", batch_size=16, max_steps=70, layout=_clip_files, script=FILES_SCRIPT),
    Scenario("healthy", "fast steps, finishes", "healthy", (), None, max_steps=2000),
    Scenario("slow-steps", "every step computes for 2.5 s in the model's forward; never a hang",
             "healthy", (), None, max_steps=9),
    Scenario("checkpoint-pause",
             "every 10 steps rank 0 writes a checkpoint for ~3.5 s while rank 1 waits in a barrier",
             "healthy", (), None, max_steps=60),
    # Healthy rhythms with no DataLoader and a few bytes a step (rhythm.py): never a hang.
    Scenario("slow-rank", "rank 1 computes ~4 s a step on a tiny model; rank 0 waits in the gradient "
             "all_reduce: a straggler, slow, never a hang", "slow", (1,), "slow-rank", max_steps=6,
             layout=_plain(2, clips=2), script=RHYTHM_SCRIPT),
    Scenario("tiny-allreduce", "thousands of fast steps of a 1-float all_reduce, always caught there",
             "healthy", (), None, max_steps=40000, layout=_plain(2, clips=2), script=RHYTHM_SCRIPT),
    Scenario("validation-pause", "every 15 steps rank 0 validates for ~8 s while rank 1 waits in a barrier",
             "healthy", (), None, max_steps=32, layout=_plain(2, clips=2), script=RHYTHM_SCRIPT),
    Scenario("compute-2x", "rank 1 computes 1.0 s a step, rank 0 0.5 s: rank 0 waits half of every step; "
             "slow, never a hang", "slow", (1,), "slow-rank", max_steps=30, layout=_plain(2, clips=2),
             script=RHYTHM_SCRIPT),
    Scenario("longer-samples", "a token corpus sorted by length, cut into contiguous chunks: rank 1's samples "
             "are 2.3x longer and rank 0 waits for it every step; slow, never a hang", "slow", (1,), "slow-rank",
             max_steps=240, layout=_plain(2, clips=2), script=RHYTHM_SCRIPT),
    Scenario("jitter", "every rank computes 0.2-0.8 s a step at random: they take turns waiting; healthy",
             "healthy", (), None, max_steps=40, layout=_plain(2, clips=2), script=RHYTHM_SCRIPT),
    Scenario("sync-line", "every rank parks at the same all_reduce line each step (a GPU-bound NCCL "
             "job's shape)", "healthy", (), None, max_steps=400, layout=_plain(2, clips=2), script=RHYTHM_SCRIPT),
    # NCCL's shape of a wait on CPU (spin.py): collectives return at once, the host spins at the
    # job's next sync line (`.item()`), 100 % CPU, counters still, no torch frame.
    Scenario("spin-data-stall", "3 ranks, NCCL's wait shape: rank 2's DataLoader worker blocks opening a "
             "shard; ranks 0 and 1 spin at their .item() line for ever", "hang", (2,), "dataloader-stall",
             nproc=3, num_workers=1, layout=_plain(2, clips=2), script=SPIN_SCRIPT),
    Scenario("spin-straggler", "NCCL's wait shape: rank 1 computes 0.6 s more a step; rank 0 spins at its "
             ".item() line: slow, never a hang (told by the GPUs' readings)", "slow", (1,), "slow-rank", num_workers=1,
             max_steps=60, layout=_plain(2, clips=2), script=SPIN_SCRIPT, needs_gpu=True),
    Scenario("spin-healthy", "NCCL's wait shape, every rank alike, each spinning a little at its .item() "
             "line", "healthy", (), None, num_workers=1, max_steps=400, layout=_plain(2, clips=2),
             script=SPIN_SCRIPT),
    Scenario("spin-eval-pause", "NCCL's wait shape: every 15 steps rank 0 evaluates for ~8 s while rank 1 "
             "spins at its .item() line", "healthy", (), None, num_workers=1, max_steps=50,
             layout=_plain(2, clips=2), script=SPIN_SCRIPT),
]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in _ALL}

__all__ = ["FILES_SCRIPT", "RHYTHM_SCRIPT", "SPIN_SCRIPT", "SCENARIOS", "Scenario", "TRAIN_SCRIPT", "VERDICTS"]
