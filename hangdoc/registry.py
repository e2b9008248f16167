"""Every slug hangdoc prints, in one registry: the live rules, `hangdoc check`'s and `hangdoc run`'s.

Each module declares its records once, as pylint's checkers declare their messages: a live
rule module its `RULE` (hangdoc/rules/), a checker its `RECORDS` (hangdoc/check/*_rules.py),
the final verdict (hangdoc/report/judge.py, its records in report/verdict.py) its `RECORDS`. `hangdoc rules` lists them, `hangdoc explain` shows their pages (shipped
in the package, hangdoc/rules/pages/), every finding takes its fix from its record.
"""
from __future__ import annotations

import functools
import re
from importlib import resources

from hangdoc.rules import all_rules
from hangdoc.model import Rule

PAGES = ("rules", "pages")     # inside the hangdoc package
# Where tests/golden_record.py --docs fills a page's example: for its maintainers, not its readers.
_EXAMPLE_MARK = re.compile(r"^<!-- example: \S+ \S+ -->\n\n?", re.M)


@functools.lru_cache(maxsize=None)
def records() -> dict[str, Rule]:
    """slug -> record, the live rules first; a slug declared twice is a bug, said at once."""
    # Imported here, when first asked: a command that prints no slug list loads none of them.
    from hangdoc.check import ckpt_rules, data_rules, env_rules
    from hangdoc.report import verdict

    found: dict[str, Rule] = {}
    declared = (*env_rules.RECORDS, *data_rules.RECORDS, *ckpt_rules.RECORDS, *verdict.RECORDS)
    for rule in [*all_rules(), *declared]:
        if rule.slug in found:
            raise RuntimeError(f"slug {rule.slug} is declared twice")
        found[rule.slug] = rule
    return found


def record(slug: str) -> Rule:
    """The record of `slug`; a KeyError names a slug no module declares."""
    return records()[slug]


def page(slug: str) -> str | None:
    """The documentation page of `slug` (or of a verdict word such as `interrupted`, or `glossary`),
    from the package, as a reader sees it: without the markers of its examples. A slug not in
    `topics()` has none: no file name is ever made of what a user typed (a 255-character one
    raised `OSError: File name too long`)."""
    if slug not in topics():
        return None
    path = resources.files("hangdoc").joinpath(*PAGES, f"{slug}.md")
    return _EXAMPLE_MARK.sub("", path.read_text()) if path.is_file() else None


def topics() -> list[str]:
    """Every name `explain` knows: the records' slugs and the other pages (verdicts such as `ended-unknown`)."""
    folder = resources.files("hangdoc").joinpath(*PAGES)
    pages = [p.name[:-3] for p in folder.iterdir() if p.name.endswith(".md")] if folder.is_dir() else []
    return sorted(set(records()) | set(pages))
