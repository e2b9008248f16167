"""The live rules: every rule module exposes `RULE`; `run_rules` applies them all to a bundle.

Every slug hangdoc prints (these, `hangdoc check`'s, `hangdoc run`'s) is in one registry,
`hangdoc/registry.py`, which `hangdoc rules` and `hangdoc explain` read."""
from __future__ import annotations

import dataclasses
import importlib

from hangdoc.model import Finding
from hangdoc.rules.base import Context, Rule

# Root causes first, the generic findings after them. The rules run in this order and each reads
# the findings of those before it (dataloader-stall stays quiet where a more specific rule fired).
RULE_MODULES = (
    "debugger_prompt",
    "file_lock_wait",
    "child_process_wait",
    "helper_thread_died",
    "slow_decompression",
    "tar_member_decode",
    "worker_native_lock",
    "worker_deadlock",
    "fork_unsafe_arm",
    "shm_exhausted",
    "worker_error",
    "worker_died",
    "uneven_shards",
    "dataloader_stall",
    "workers_cpu_confined",
    "cpu_quota_throttled",
    "threads_oversubscribed",
    "gpu_starved",
    "slow_rank",
    "collective_straggler",
    "collective_mismatch",
    "flight_recorder",
    "no_progress",
    "missing_ranks",
    "rank_died",
    "workers_restarted",
)


def all_rules() -> list[Rule]:
    return [importlib.import_module(f"hangdoc.rules.{name}").RULE for name in RULE_MODULES]


def get_rule(slug: str) -> Rule | None:
    return next((r for r in all_rules() if r.slug == slug), None)


def run_rules(ctx: Context) -> tuple[Finding, ...]:
    # The timelines are built once, here: a copy of the context does not carry the cached ones.
    ctx = dataclasses.replace(ctx, lines=ctx.timelines)
    findings: list[Finding] = []
    for rule in all_rules():
        findings.extend(rule.check(dataclasses.replace(ctx, findings=tuple(findings))))
    return tuple(sorted(findings, key=lambda f: f.severity.rank))
