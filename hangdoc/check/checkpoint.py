"""`check checkpoint`: load safely -> list keys -> what a resume restores -> findings."""
from __future__ import annotations

from pathlib import Path

from hangdoc.check.ckpt_keys import checkpoint_keys
from hangdoc.check.ckpt_load import load_checkpoint, read_side_car, side_car_path
from hangdoc.check.ckpt_rules import checkpoint_findings, find_restores
from hangdoc.check.model import CHECK_SCHEMA, CheckpointFacts, CheckResult


def check_checkpoint(path: str | Path) -> CheckResult:
    """Check what resuming from the checkpoint at `path` restores."""
    keys = checkpoint_keys(load_checkpoint(path))
    side_car = side_car_path(path)
    side_car_keys = read_side_car(side_car) if side_car else {}
    facts = CheckpointFacts(
        path=str(path),
        size_bytes=Path(path).stat().st_size,
        side_car=str(side_car) if side_car else None,
        keys=keys,
        side_car_keys=side_car_keys,
        restores=find_restores(keys, side_car_keys),
    )
    return CheckResult(CHECK_SCHEMA, "checkpoint", checkpoint_findings(facts), facts)
