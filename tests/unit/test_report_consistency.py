"""Every number in a report agrees with every other one: no wait longer than the watch, no
PROGRESS word that contradicts the verdict, no rate from an offset that went backwards, no
"went to sleep 0 times (a blocking stack read costs 2)"."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hangdoc.bundle.files import load_bundle
from hangdoc.model import Progress, RankReport, RankState
from hangdoc.render.words import progress_word
from hangdoc.rules.samples import file_read_line, FileRead

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "expected.txt").exists())
PROGRESS_WORDS = {"active", "working", "still", "-"}
OFFSET = re.compile(r"offset (\d+\.\d) MB -> (\d+\.\d) MB")
FOR_S = re.compile(r"\bfor (\d+(?:\.\d+)?) s\b")


def table(text: str) -> list[dict[str, str]]:
    """The ranks table of a text report: one dict a rank row (workers' rows left out)."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("RANK "))
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", lines[head])]
    names = lines[head].split("  ")
    names = [n.strip() for n in names if n.strip()]
    rows = []
    for line in lines[head + 1:]:
        if not line.strip():
            break
        if line.startswith("  w") or not line[:starts[1]].strip():
            continue      # a worker's row, or a long top frame's second line
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
        rows.append(dict(zip(names, cells)))
    return rows


@pytest.mark.parametrize("case", CASES)
def test_a_golden_report_never_contradicts_itself(case):
    # GIVEN a golden case's text report and the bundle it was written from
    text = (GOLDEN / case / "expected.txt").read_text()
    bundle = load_bundle(GOLDEN / case / "bundle.json")
    watched = bundle.samples[-1].time - bundle.samples[0].time
    from_past = "before hangdoc attached" in text
    verdict = text.split("\n", 1)[0]
    # THEN no rank has waited longer than the watch saw (unless the report says it judged from the past)
    for row in table(text):
        if row["FOR"].endswith("s") and row["FOR"][:-1].isdigit() and not from_past:
            assert int(row["FOR"][:-1]) <= watched + 1, (row, watched)
        # AND the PROGRESS word is one of the glossary's, never "slow" or "stuck" under a healthy verdict
        assert row["PROGRESS"] in PROGRESS_WORDS, row
    if not from_past:
        for m in FOR_S.finditer(text):
            assert float(m.group(1)) <= watched + 1, (m.group(0), watched)
    assert "HEALTHY" not in verdict or not re.search(r"\b(slow|stuck)\b", "\n".join(
        r["PROGRESS"] for r in table(text)))
    # AND a rate is never printed over an offset that went backwards
    for m in OFFSET.finditer(text):
        assert float(m.group(2)) >= float(m.group(1)), m.group(0)
    # AND no count contradicts its own explanation
    assert "went to sleep 0 times" not in text and "time(s)" not in text


def test_a_read_whose_offset_went_back_says_what_was_read_not_first_to_last():
    # GIVEN a worker that read 0.3 MB of a shard while its offset went from 0.7 MB back to 0.5 MB
    read = FileRead("/data/a.tar", 2_000_000, 700_000, 500_000, 480_000, 36.8, 1)
    # WHEN its evidence line is written
    line = file_read_line(read)
    # THEN the rate is of the bytes read, and the offsets are said as where it went back from and to
    assert line == ("/data/a.tar (2.0 MB): read 0.5 MB in 36.8 s = 13 kB/s; the offset went back 1 time "
                    "(from 0.7 MB, now 0.5 MB, 25% of the file)")
    assert "->" not in line


@pytest.mark.parametrize(("state", "progress", "word"), [
    (RankState.COMPUTE, Progress.SLOW, "working"),
    (RankState.COLLECTIVE, Progress.STUCK, "still"),
    (RankState.COMPUTE, Progress.ACTIVE, "active"),
    (RankState.EXITED, Progress.STUCK, "-"),
    (RankState.EXITED, Progress.SLOW, "-"),
])
def test_the_progress_cell_never_says_slow_or_stuck(state, progress, word):
    # GIVEN a rank in this state with this progress WHEN its PROGRESS cell is written THEN it reads `word`
    rank = RankReport(rank=0, pid=1, host="h", state=state, waiting_s=0.0, progress=progress, gpu=None,
                      top_frame=None)
    assert progress_word(rank) == word
