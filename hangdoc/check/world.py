"""The world size `check data` assumes when none is given: what this node says of it, and why."""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hangdoc.base.parse import to_int

_GPU_DEVICE = re.compile(r"nvidia\d+")


def known_world_size(environ: Mapping[str, str] | None = None,
                     job_sizes: Callable[[], Sequence[int | None]] | None = None,
                     dev: str | Path = "/dev") -> tuple[int, str]:
    """(world size, where it came from): torchrun's WORLD_SIZE in the environment; else the job
    running on this node; else one rank per visible GPU (torchrun --nproc_per_node=gpu); else 1."""
    env = os.environ if environ is None else environ
    given = to_int(env.get("WORLD_SIZE"))
    if given and given > 0:
        return given, "WORLD_SIZE in the environment"
    sizes = {s for s in (job_sizes or _node_job_sizes)() if s}
    if len(sizes) == 1:
        size = sizes.pop()
        return size, "the world size of the job running on this node"
    gpus = _visible_gpus(env, Path(dev))
    if gpus:
        return gpus, f"one rank per GPU: {gpus} visible on this node"
    return 1, "no job on this node, no WORLD_SIZE and no GPU: one rank"


def _node_job_sizes() -> list[int | None]:
    from hangdoc.collect.jobs import list_jobs

    try:
        return [job.world_size for job in list_jobs()]
    except OSError:
        return []


def _visible_gpus(env: Mapping[str, str], dev: Path) -> int:
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and not d.strip().startswith("-")])
    try:
        return sum(1 for p in dev.iterdir() if _GPU_DEVICE.fullmatch(p.name))
    except OSError:
        return 0
