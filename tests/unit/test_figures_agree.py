"""Every figure a report prints agrees with the ones it sits with: one thread said one way, a
threshold's words say what it was learned from (a gap between samples is never a step's time),
each rank's shares add up to its whole (or name the rest), a fix fits the job's backend and the
finding above it. Held over every golden bundle, through the judge, in every format."""
from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import pytest

from hangdoc.analyze.jobfacts import GLOO, backend
from hangdoc.bundle.files import load_bundle
from hangdoc.render.json import render_json
from hangdoc.render.live import status_line
from hangdoc.render.markdown import render_markdown
from hangdoc.render.text import render_text
from hangdoc.model import Cause
from hangdoc.report import judge
from hangdoc.rules import slugs

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "bundle.json").exists())


def still_main_thread(bundle, pid: int):
    """The bundle with `pid`'s main thread neither running nor waking from its first sample on."""
    first = next(p.proc.main_thread for p in bundle.samples[0].processes if p.pid == pid)

    def frozen(sample):
        procs = tuple(dataclasses.replace(p, proc=dataclasses.replace(p.proc, main_thread=first))
                      if p.pid == pid and p.proc is not None and p.proc.main_thread is not None else p
                      for p in sample.processes)
        return dataclasses.replace(sample, processes=procs)
    return dataclasses.replace(bundle, samples=tuple(frozen(s) for s in bundle.samples))


def texts(report) -> dict[str, str]:
    said = {}
    for name, render in (("text", lambda r, o: render_text(r, o, width=100_000)), ("markdown", render_markdown),
                         ("json", render_json)):
        out = io.StringIO()
        render(report, out)
        said[name] = out.getvalue()
    return said


def test_a_rank_that_neither_ran_nor_woke_in_its_wait_is_asleep_not_never_went_to_sleep():
    # GIVEN a hang whose waiting rank 0's main thread used no CPU and never woke over the wait
    bundle = load_bundle(GOLDEN / "gpu-gloo-cuda" / "bundle.json")
    rank0 = next(p.pid for p in bundle.job.ranks if p.rank == 0)
    report = judge(still_main_thread(bundle, rank0)).report
    # WHEN collective-straggler cites the waiting rank
    evidence = " ".join(e for f in report.findings for e in f.evidence)
    # THEN it says the thread slept in its wait, as the witnesses do, never that it did not sleep
    assert "never went to sleep" not in evidence
    assert "its main thread was asleep in its wait (0.00 s of CPU, no wake-up)" in evidence


def test_a_threshold_learned_from_the_samples_is_not_called_a_step_time():
    # GIVEN a job whose threshold was learned from the loop's moves between samples
    report = judge(load_bundle(GOLDEN / "gpu-gloo-cuda" / "bundle.json")).report
    assert report.threshold.source == "learned"
    text = texts(report)["text"]
    # THEN the report says the gap between samples, never that the loop moved "at least every" so often
    assert "moved at least every" not in text and "steps up to" not in text
    assert "the samples saw a rank's loop move at most 2.0 s apart (11 moves seen" in text
    assert "a gap between samples, not a step's time" in text


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


@pytest.mark.parametrize("case", CASES)
def test_every_golden_report_agrees_with_itself(case):
    # GIVEN a golden bundle, judged and written in every format
    bundle = load_bundle(GOLDEN / case / "bundle.json")
    report = judge(bundle).report
    said = texts(report)
    text = said["text"]
    everything = "\n".join(said.values())
    # THEN each rank's shares on the headline's Time line add up to its whole, within rounding
    headline = {}
    for line in (line for line in text.splitlines() if line.startswith("Time (")):
        for part in line.split(": ", 1)[1].rstrip(".").split("; "):
            rank, words = re.match(r"rank (\d+) (.*)", part).groups()
            headline[rank] = shares_of(words)
            assert adds_up(headline[rank]), (case, part)
    # AND slow-rank's share lines add up the same way, and say the same shares as the headline
    for e in (e for f in report.findings if f.rule == "slow-rank" for e in f.evidence):
        m = re.match(r"rank (\d+), over \d+ samples: (.*)", e)
        if m:
            mine = shares_of(m.group(2))
            assert adds_up(mine), (case, e)
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
    if backend(bundle) == GLOO:
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


# The rules that name a rank's root cause (its own code, its workers, its data): a generic finding
# on the same rank follows theirs.
ROOTS = set(slugs(Cause.OWN_CODE) + slugs(Cause.WORKERS) + slugs(Cause.DATA))


def test_a_straggler_with_longer_samples_is_told_its_inputs_are_bigger():
    # GIVEN the newcomer's job: a corpus sorted by length cut into contiguous chunks, rank 1's samples 2.3x longer
    report = judge(load_bundle(GOLDEN / "longer-samples" / "bundle.json")).report
    # WHEN slow-rank names the straggler
    finding = next(f for f in report.findings if f.rule == "slow-rank")
    # THEN its title, its evidence and its fix say that its inputs are bigger, with the lengths its loop held
    assert finding.ranks == (1,) or list(finding.ranks) == [1]
    assert "its inputs are bigger" in finding.title
    said = next(e for e in finding.evidence if e.startswith("its inputs are bigger than the others'"))
    assert re.search(r"seq_len \d+ against \d+", said), said
    assert finding.fix.startswith("Its inputs are bigger than the others' (longer samples, larger batches)")


def test_a_straggler_that_only_computes_longer_is_not_said_to_have_bigger_inputs():
    # GIVEN compute-2x: rank 1 computes twice as long a step on inputs like the others'
    report = judge(load_bundle(GOLDEN / "compute-2x" / "bundle.json")).report
    finding = next(f for f in report.findings if f.rule == "slow-rank")
    # THEN nothing is said of its inputs
    assert "inputs are bigger" not in finding.title + " ".join(finding.evidence) + finding.fix
