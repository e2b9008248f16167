"""`check env`: launch settings -> host probes -> findings."""
from __future__ import annotations

from hangdoc.check.env_rules import env_findings
from hangdoc.check.host import HostProbes, probe_env
from hangdoc.check.model import CHECK_SCHEMA, CheckResult, Launch
from hangdoc.base.errors import HangdocError

DEFAULT_PREFETCH = 2   # torch's DataLoader default when num_workers > 0


def check_env(num_workers: int | None = None, nproc_per_node: int = 1, prefetch_factor: int = DEFAULT_PREFETCH,
              batch_bytes: int | None = None, probes: HostProbes | None = None) -> CheckResult:
    """Check this host and the launch settings a job will run with."""
    if num_workers is not None and num_workers < 0:
        raise HangdocError(f"--num-workers must be 0 or more, got {num_workers}")
    for name, value in (("--nproc-per-node", nproc_per_node), ("--prefetch-factor", prefetch_factor)):
        if value < 1:
            raise HangdocError(f"{name} must be at least 1, got {value}")
    if batch_bytes is not None and batch_bytes < 1:
        raise HangdocError(f"--batch-bytes must be at least 1, got {batch_bytes}")
    facts = probe_env(Launch(num_workers, nproc_per_node, prefetch_factor, batch_bytes), probes)
    return CheckResult(CHECK_SCHEMA, "env", env_findings(facts), facts)
