"""One registry of every slug hangdoc prints: each has one record (title, severity, fix) and a page."""
from __future__ import annotations

import dataclasses

import pytest

from hangdoc.check import ckpt_rules, data_rules, env_rules
from hangdoc.cli import main
from hangdoc.model import Rule
from hangdoc.registry import page, record, records
from hangdoc.rules import all_rules

SLUGS = sorted(records())


def test_the_registry_holds_the_live_rules_check_and_run():
    commands = {c for r in records().values() for c in r.commands}
    assert {"watch", "report", "run", "check"} <= commands
    assert {r.slug for r in all_rules()} <= set(SLUGS)
    assert {"shm-too-small", "resume-restarts-epoch", "run-timeout", "command-failed"} <= set(SLUGS)


@pytest.mark.parametrize("slug", SLUGS)
def test_each_record_has_a_one_line_title_a_fix_and_a_page_explain_prints(slug, capsys):
    rule = record(slug)
    assert rule.title and "\n" not in rule.title
    assert rule.fix and "\n" not in rule.fix
    assert rule.summary
    # WHEN `hangdoc explain SLUG` runs THEN it prints the page shipped in the package, exit 0
    assert main(["explain", slug]) == 0
    out = capsys.readouterr().out
    assert out == page(slug) and out.startswith(f"# {slug}\n")


def test_records_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        record("uneven-shards").fix = "something else"


def test_code_fixes_carry_a_snippet():
    assert "multiprocessing_context" in record("fork-unsafe-arm").snippet
    assert "io.BytesIO" in record("tar-member-decode").snippet
    assert "state_dict()" in record("resume-restarts-epoch").snippet


@pytest.mark.parametrize("checker", [env_rules, data_rules, ckpt_rules], ids=lambda m: m.__name__)
def test_every_record_a_checker_raises_is_registered_for_check(checker):
    # GIVEN the records a checker builds its findings from: every Rule it names at module level
    named = [value for value in vars(checker).values() if isinstance(value, Rule)]
    # THEN each is declared (RECORDS) or shared from a live rule (SHARED), and is the registry's
    # record for its slug, listed for `check`
    assert named and set(named) <= {*checker.RECORDS, *getattr(checker, "SHARED", ())}
    assert all(record(r.slug) is r and "check" in r.commands for r in named)


def test_hangdoc_rules_lists_every_slug(capsys):
    assert main(["rules"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert listed == set(SLUGS)


def test_explain_refuses_an_unknown_slug_in_one_line(capsys):
    assert main(["explain", "no-such-slug"]) == 2
    err = capsys.readouterr().err
    assert "no rule or finding named 'no-such-slug'" in err and "shm-too-small" in err
    assert main(["explain", "../../etc/passwd"]) == 2


@pytest.mark.parametrize("slug", ["x" * 255, "y" * 5000, "README", "__init__", "pages", "rank-died.md", "rank-died\x00",
                                  " rank-died", "-"])
def test_explain_refuses_any_slug_not_in_the_list_with_the_list(slug, capsys):
    # GIVEN a slug that is not a topic (too long for a file name, a file beside the pages, a NUL)
    # WHEN explained THEN one line, exit 2, with the list, never an OSError
    assert main(["explain", "--", slug]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the slugs are: " in err and "rank-died" in err
