"""The figures of one report checked against each other: each rank's shares add up to its whole
(the rest named), the headline and slow-rank say the same shares, one thread is said one way, a
gap between samples is never a step's time, a fix fits the job's backend and the finding above
it, the status line fits 100 columns, Markdown escapes alike. Used over the golden bundles
(unit) and the zoo's reports (integration)."""
from __future__ import annotations

import io
import re

from hangdoc.model import Cause
from hangdoc.render.json import render_json
from hangdoc.render.live import status_line
from hangdoc.render.markdown import render_markdown
from hangdoc.render.text import render_text
from hangdoc.rules import slugs


def texts(report) -> dict[str, str]:
    said = {}
    for name, render in (("text", lambda r, o: render_text(r, o, width=100_000)), ("markdown", render_markdown),
                         ("json", render_json)):
        out = io.StringIO()
        render(report, out)
        said[name] = out.getvalue()
    return said


def adds_up(shares: dict[str, int]) -> bool:
    """Shares each rounded to a whole percent add up to 100 within half a point each."""
    return abs(sum(shares.values()) - 100) <= len(shares) // 2


def headline_shares(report, key: str) -> list[dict[str, int]]:
    from hangdoc.base.words import share_words
    from hangdoc.rules.slow_rank import SHARE_WORDS
    return [shares_of(share_words(r.shares, SHARE_WORDS, "")) for r in report.ranks if r.shares is not None]


def shares_of(said: str) -> dict[str, int]:
    """"waits for the others 14% (4%-40%), on data 79%, computes 0%, other 7%" -> {name: percent};
    what is in brackets (an interval, the run queue's wait across the shares) is no share."""
    plain = re.sub(r" \([^)]*\)", "", said)
    return {name.strip(): int(p) for name, p in re.findall(r"([A-Za-z/' ]+?) (\d+)%", plain)}


# The rules that name a rank's root cause (its own code, its workers, its data): a generic finding
# on the same rank follows theirs.
ROOTS = set(slugs(Cause.OWN_CODE) + slugs(Cause.WORKERS) + slugs(Cause.DATA))


def assert_figures_agree(report, case: str = "") -> None:
    """Every check above over `report`, written in every format; `case` names it in a failure."""
    said = texts(report)
    text = said["text"]
    everything = "\n".join(said.values())
    # Each rank's shares on the headline's Time line add up to its whole, within rounding
    headline = {}
    for line in (line for line in text.splitlines() if line.startswith("Time (")):
        for part in line.split(": ", 1)[1].rstrip(".").split("; "):
            m = re.match(r"rank (\d+) (.*)", part)
            if m is None:
                continue          # "; 3 more ranks", a rank without a number
            rank, words = m.groups()
            headline[rank] = shares_of(words)
            assert adds_up(headline[rank]), (case, part)
    # AND slow-rank's share lines add up the same way, and say the same shares as the headline
    for e in (e for f in report.findings if f.rule == "slow-rank" for e in f.evidence):
        m = re.match(r"rank (\d+), over \d+ samples: (.*)", e)
        if m:
            mine = shares_of(m.group(2))
            assert adds_up(mine), (case, e)
            if m.group(1) in headline:
                assert sorted(mine.values()) == sorted(headline[m.group(1)].values()), (case, e, headline)
    # AND what keeps the straggler says the same figures as its share lines
    for e in (e for f in report.findings if f.rule == "slow-rank" for e in f.evidence):
        for name, own in re.findall(r"(its own compute|waiting on its DataLoader) (\d+)% of a step", e):
            key = {"its own compute": "computes", "waiting on its DataLoader": "waits on data"}[name]
            assert int(own) in [shares[key] for shares in headline_shares(report, key)], (case, e)
    # AND a thread is never both asleep and "never went to sleep" with no CPU used
    assert "0.00 s of CPU and never went to sleep" not in everything
    # AND a gap between samples is never called a step's time
    assert "moved at least every" not in everything and "steps up to" not in everything
    # AND a gloo job is never told to set NCCL's variables
    if report.backend == "gloo":
        assert "TORCH_NCCL" not in everything, case
    # AND a finding that follows a root cause on the same rank does not hand out the generic advice
    roots = {r for f in report.findings if f.rule in ROOTS for r in f.ranks}
    for f in report.findings:
        if f.rule == "collective-straggler" and roots & set(f.ranks):
            assert "balance its data or work" not in f.fix, (case, f.fix)
    # AND the status line fits 100 columns and never says "quiet 55 s of 10 s"
    line = status_line(report)
    assert len(line) <= 100, line
    for q, t in re.findall(r"quiet (\d+) s of (\d+(?:\.\d+)?) s", line):
        assert int(q) <= float(t), line
    # AND Markdown never leaves a bracket bare beside an escaped one
    prose = re.sub(r"```.*?```", "", said["markdown"], flags=re.S)
    assert not re.search(r"&lt;[^&\s]*>", prose), case
