"""The rules run in order and each reads the findings of those before it from its Context."""
from __future__ import annotations

from pathlib import Path

import hangdoc.rules
from hangdoc.analyze.diagnose import diagnose
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Cause, Rule, Severity, finding
from hangdoc.rules import all_rules, dataloader_stall, run_rules, slugs, worker_deadlock
from hangdoc.rules.base import Context

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def context_of(case: str) -> Context:
    bundle = load_bundle(GOLDEN / case / "bundle.json")
    return Context(bundle, diagnose(bundle))


def test_dataloader_stall_fires_when_no_earlier_finding_explains_the_rank():
    # GIVEN rank 1 of stuck-fetch waiting on its DataLoader, and no finding before this rule
    ctx = context_of("stuck-fetch")
    # WHEN dataloader-stall runs THEN it names rank 1
    assert [f.ranks for f in dataloader_stall.check(ctx)] == [(1,)]


def test_dataloader_stall_stays_quiet_where_a_more_specific_rule_already_fired():
    # GIVEN the same rank, already explained by a worker-deadlock finding of an earlier rule
    ctx = context_of("stuck-fetch")
    explained = finding(worker_deadlock.RULE, [1], "DataLoader worker 0 of rank 1 is deadlocked", ["stack"])
    # WHEN dataloader-stall reads it from the context THEN it adds nothing
    before = (worker_deadlock.RULE,)
    assert dataloader_stall.check(Context(ctx.bundle, ctx.diagnosis, findings=(explained,), before=before)) == []


def test_every_rule_a_general_rule_defers_to_runs_before_it():
    # GIVEN the rules in their order, and those that name a cause a later rule stands back for
    order = slugs()
    workers, own_code = slugs(Cause.WORKERS), slugs(Cause.OWN_CODE)
    # THEN each runs before the rule that reads its findings
    assert workers and own_code
    assert all(order.index(slug) < order.index("dataloader-stall") for slug in workers)
    assert all(order.index(slug) < order.index("collective-straggler") for slug in own_code)


def test_the_slugs_a_general_rule_stands_back_for_are_those_it_always_stood_back_for():
    # GIVEN the kinds of cause the rules declare WHEN they are listed THEN the rules that named them still do
    # (a new rule that names one joins them from its own module)
    assert set(slugs(Cause.WORKERS)) >= {"slow-decompression", "tar-member-decode", "worker-deadlock", "worker-died",
                                         "worker-error", "fork-unsafe-arm", "file-lock-wait", "worker-native-lock"}
    assert set(slugs(Cause.OWN_CODE)) >= {"debugger-prompt", "file-lock-wait", "child-process-wait", "helper-thread-died"}


def test_run_rules_hands_each_rule_the_findings_of_the_rules_before_it(monkeypatch):
    # GIVEN two rules: the first finds something, the second records what its context holds
    seen = []
    first = Rule("first", "First", Severity.WARNING, check=lambda ctx: [finding(first, [0], "one", [])])
    second = Rule("second", "Second", Severity.INFO, check=lambda ctx: seen.append(ctx.findings) or [])
    monkeypatch.setattr(hangdoc.rules, "all_rules", lambda: [first, second])
    # WHEN they run THEN the second sees the first's finding
    findings = run_rules(context_of("stuck-fetch"))
    assert [f.rule for f in findings] == ["first"]
    assert seen == [findings]
