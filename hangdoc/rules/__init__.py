"""The live rules, declared once: `RULES` lists every rule's record in the order they run, and
`run_rules` applies them all to a bundle.

Every slug hangdoc prints (these, `hangdoc check`'s, `hangdoc run`'s) is in one registry,
`hangdoc/registry.py`, which `hangdoc rules` and `hangdoc explain` read."""
from __future__ import annotations

import dataclasses

from hangdoc.model import Cause, Finding
from hangdoc.rules import (
    child_process_wait, collective_mismatch, collective_straggler, cpu_quota_throttled, dataloader_stall,
    debugger_prompt, file_lock_wait, flight_recorder, fork_unsafe_arm, gpu_starved, helper_thread_died,
    missing_ranks, no_progress, rank_died, rank_stopped, reread_loop, shm_exhausted, slow_decompression, slow_rank, tar_member_decode,
    threads_oversubscribed, uneven_shards, worker_deadlock, worker_died, worker_error, worker_native_lock,
    workers_cpu_confined, workers_restarted,
)
from hangdoc.rules.base import Context, Rule

# Root causes first, the generic findings after them. The rules run in this order and each reads
# the findings of those before it (a rule stands back where an earlier one named the cause: see
# `Rule.causes` and `Context.explained`).
RULES: tuple[Rule, ...] = (
    rank_stopped.RULE,
    debugger_prompt.RULE,
    file_lock_wait.RULE,
    child_process_wait.RULE,
    helper_thread_died.RULE,
    reread_loop.RULE,
    slow_decompression.RULE,
    tar_member_decode.RULE,
    worker_native_lock.RULE,
    worker_deadlock.RULE,
    fork_unsafe_arm.RULE,
    shm_exhausted.RULE,
    worker_error.RULE,
    worker_died.RULE,
    uneven_shards.RULE,
    workers_cpu_confined.RULE,
    cpu_quota_throttled.RULE,
    dataloader_stall.RULE,
    threads_oversubscribed.RULE,
    gpu_starved.RULE,
    slow_rank.RULE,
    collective_straggler.RULE,
    collective_mismatch.RULE,
    flight_recorder.RULE,
    no_progress.RULE,
    missing_ranks.RULE,
    rank_died.RULE,
    workers_restarted.RULE,
)


def all_rules() -> list[Rule]:
    return list(RULES)


def get_rule(slug: str) -> Rule | None:
    return next((r for r in all_rules() if r.slug == slug), None)


def slugs(cause: Cause | None = None) -> tuple[str, ...]:
    """The live rules' slugs in their order; with `cause`, those of the rules that name that kind of cause."""
    return tuple(r.slug for r in all_rules() if cause is None or cause in r.causes)


def run_rules(ctx: Context) -> tuple[Finding, ...]:
    # The timelines and the facts are built once, here: a copy of the context does not carry the cached ones.
    ctx = dataclasses.replace(ctx, lines=ctx.timelines, facts=ctx.worked)
    findings: list[Finding] = []
    rules = all_rules()
    for i, rule in enumerate(rules):
        findings.extend(rule.check(dataclasses.replace(ctx, findings=tuple(findings), before=tuple(rules[:i]))))
    return tuple(sorted(findings, key=lambda f: f.severity.rank))
