"""The shared vocabulary: one fix per slug, for check and the live rules alike."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import hangdoc.check
from hangdoc.advice import ADVICE, Advice, advice

LIVE_SLUGS = {
    "slow-decompression", "uneven-shards", "fork-unsafe-arm", "resume-restarts-epoch", "gpu-starved",
    "tar-member-decode", "worker-deadlock", "worker-died", "worker-error", "dataloader-stall",
    "collective-straggler", "collective-mismatch",
}


def test_every_live_rule_slug_has_advice():
    assert LIVE_SLUGS <= set(ADVICE)


@pytest.mark.parametrize("slug", sorted(ADVICE))
def test_each_fix_and_title_is_one_line(slug):
    item = advice(slug)
    assert isinstance(item, Advice)
    assert item.title and "\n" not in item.title
    assert item.fix and "\n" not in item.fix


def test_advice_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ADVICE["uneven-shards"].fix = "something else"


def test_code_fixes_carry_a_snippet():
    assert "multiprocessing_context" in ADVICE["fork-unsafe-arm"].snippet
    assert "io.BytesIO" in ADVICE["tar-member-decode"].snippet
    assert "state_dict()" in ADVICE["resume-restarts-epoch"].snippet


def test_every_slug_the_check_rules_raise_has_advice():
    # the rule modules name their slugs as string literals passed to make(...)
    source = "".join(p.read_text() for p in Path(hangdoc.check.__file__).parent.glob("*_rules.py"))
    raised = set(re.findall(r'make\("([a-z0-9-]+)"', source))
    raised |= set(re.findall(r'"([a-z]+(?:-[a-z]+)+)": \(', source))  # data_rules' per-status titles
    assert raised and raised <= set(ADVICE)
