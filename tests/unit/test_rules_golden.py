"""The root-cause rules on golden bundles: real torchrun jobs recorded by tests/golden_record.py.

Each tests/golden/<case>/ holds bundle.json (what `hangdoc watch` saved), expected.json (verdict,
culprits, the rules that must fire, its look-alikes: the rules it is a near miss for, which must
not, its own rules' near misses among the other cases, and how its job starts), expected.md (the
Markdown report, exactly) and, where kept, expected.txt (the text report on a 120-column terminal,
NO_COLOR, exactly). A case with a README was derived by hand from a real bundle; the README says how.
Re-record: `.venv/bin/python tests/golden_record.py [CASE]`; after a deliberate change to a rule's
wording: `.venv/bin/python tests/golden_record.py --markdown-only`.
"""
from __future__ import annotations

import importlib.util
import io
import json
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from hangdoc.report import judge
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Severity
from hangdoc.render.markdown import report_markdown
from hangdoc.render.text import render_text
from hangdoc.rules import all_rules

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
_spec = importlib.util.spec_from_file_location("golden_record", GOLDEN.parent / "golden_record.py")
RECORDER = sys.modules.setdefault("golden_record", importlib.util.module_from_spec(_spec))
if not hasattr(RECORDER, "CASES"):
    _spec.loader.exec_module(RECORDER)
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "bundle.json").is_file()) if GOLDEN.is_dir() else []
ROOT_CAUSES = tuple(r.slug for r in all_rules() if r.root_cause)
SLUGS = {r.slug for r in all_rules()}


@lru_cache(maxsize=None)
def golden(name: str):
    folder = GOLDEN / name
    bundle = load_bundle(folder / "bundle.json")
    return bundle, judge(bundle).report, json.loads((folder / "expected.json").read_text())


def fired(report) -> set[str]:
    return {f.rule for f in report.findings}


def look_alikes(expected: dict) -> set[str]:
    """The rules a case names itself a near miss for; a case written before look_alikes lists them as not_fire."""
    return set(expected.get("look_alikes", expected.get("not_fire", ())))


@lru_cache(maxsize=None)
def quiet_on(name: str) -> frozenset[str]:
    """The rules that must stay quiet on a case: its own look-alikes, and every rule another case
    names it a near miss of (`near_misses`: where a new rule's case says where it must not fire)."""
    named = {rule for other in CASES for rule, cases in golden(other)[2].get("near_misses", {}).items()
             if name in cases}
    return frozenset(look_alikes(golden(name)[2]) | named)


def test_there_are_golden_cases():
    assert len(CASES) >= 10, CASES


@pytest.mark.parametrize("name", CASES)
def test_verdict_and_culprits_are_the_recorded_ones(name):
    # GIVEN a bundle recorded from a real job WHEN it is diagnosed offline
    _, report, expected = golden(name)
    # THEN the verdict and the culprit ranks are the ones the job was built to show
    assert report.verdict == expected["verdict"]
    assert list(report.culprit_ranks) == expected["culprit_ranks"]


@pytest.mark.parametrize("name", CASES)
def test_expected_rules_fire(name):
    # GIVEN a golden bundle WHEN the rules run
    _, report, expected = golden(name)
    # THEN every rule the case is about fires
    assert set(expected["fire"]) <= fired(report), [f.title for f in report.findings]


@pytest.mark.parametrize("name", CASES)
def test_near_miss_rules_stay_quiet(name):
    # GIVEN a golden bundle WHEN the rules run
    _, report, expected = golden(name)
    # THEN none of the rules it is a near miss for does, whichever case names it so
    assert not quiet_on(name) & fired(report), [f.title for f in report.findings]


@pytest.mark.parametrize("name", CASES)
def test_a_case_names_only_rules_that_exist(name):
    # GIVEN a golden case's expected.json THEN every rule it names, to fire or to stay quiet, is a rule
    _, _, expected = golden(name)
    assert set(expected["fire"]) <= SLUGS, set(expected["fire"]) - SLUGS
    assert look_alikes(expected) <= SLUGS, look_alikes(expected) - SLUGS
    assert not look_alikes(expected) & set(expected["fire"])
    # AND a near miss it names for its rules is one of its rules, on a case that exists
    for rule, cases in expected.get("near_misses", {}).items():
        assert rule in expected["fire"] and set(cases) <= set(CASES), (rule, cases)


@pytest.mark.parametrize("name", CASES)
def test_a_case_says_how_its_bundle_was_made(name):
    # GIVEN a golden case THEN its job is one the recorder starts, or it is derived, made on a GPU
    # machine or by hand, and says how
    _, _, expected = golden(name)
    if "job" in expected:
        assert expected["job"]["start"] in RECORDER.STARTS, expected["job"]
        assert RECORDER.Case.of(GOLDEN / name).start is not None
    elif "derive" in expected:
        source, edit = expected["derive"]
        assert source in CASES and edit in RECORDER.EDITS
    else:
        assert (GOLDEN / name / "README.md").is_file() or (GOLDEN / name / "README").is_file()


@pytest.mark.parametrize("name", [c for c in CASES if golden(c)[2].get("job", {}).get("start") in
                                  ("stall_job", "diverge_job", "exit_job", "restarting_job", "own_waits_job")])
def test_a_case_of_a_test_job_starts_that_job(name, tmp_path):
    # GIVEN a case whose job is a mode of a script in tests/jobs/ (those that prepare no data)
    case = RECORDER.Case.of(GOLDEN / name)
    # WHEN the recorder builds its command
    cmd, markers = case.start(tmp_path)
    # THEN it runs that script, in that mode, and waits for markers in the job's directory
    script = next(Path(word) for word in cmd if word.endswith(".py") and "/tests/jobs/" in word)
    assert script.is_file() and case.job["args"][0] in cmd
    assert markers and all(m.parent == tmp_path for m in markers)


@pytest.mark.parametrize("name", CASES)
def test_the_recorder_reads_a_case_back_as_written(name):
    # GIVEN a case's expected.json WHEN the recorder reads it and writes it again THEN it is the same
    assert RECORDER.Case.of(GOLDEN / name).expected() == golden(name)[2]


def test_an_old_expected_json_reads_its_not_fire_as_look_alikes():
    # GIVEN an expected.json written before look_alikes THEN its not_fire is the list
    assert look_alikes({"fire": [], "not_fire": ["slow-rank"]}) == {"slow-rank"}
    assert look_alikes({"fire": [], "look_alikes": ["shm-exhausted"]}) == {"shm-exhausted"}


@pytest.mark.parametrize("name", CASES)
def test_markdown_report_is_the_golden_one(name):
    # GIVEN a golden bundle WHEN rendered as Markdown, as `hangdoc report --format markdown` does
    bundle, report, _ = golden(name)
    text = report_markdown(report) + "\n"
    # THEN it is exactly expected.md
    assert text == (GOLDEN / name / "expected.md").read_text()


@pytest.mark.parametrize("name", [c for c in CASES if (GOLDEN / c / "expected.txt").is_file()])
def test_text_report_is_the_golden_one(name, monkeypatch):
    # GIVEN a golden bundle WHEN rendered as the default text report on a 120-column terminal without colour
    monkeypatch.setenv("NO_COLOR", "1")
    bundle, report, _ = golden(name)
    out = io.StringIO()
    render_text(report, out, width=120, terminal=True)
    # THEN it is exactly expected.txt, the same renderer `hangdoc report` and the README's demo use
    assert out.getvalue() == (GOLDEN / name / "expected.txt").read_text()


@pytest.mark.parametrize("name", [c for c in CASES if golden(c)[2]["verdict"] == "healthy"])
def test_a_healthy_bundle_has_no_critical_finding(name):
    # GIVEN a job that never hung WHEN diagnosed THEN nothing is critical
    _, report, _ = golden(name)
    assert not [f.title for f in report.findings if f.severity is Severity.CRITICAL]


@pytest.mark.parametrize("name", CASES)
def test_every_finding_has_evidence_and_a_fix(name):
    _, report, _ = golden(name)
    for f in report.findings:
        assert f.title and "\n" not in f.title
        assert f.evidence and all(line.strip() for line in f.evidence)
        assert f.fix


@pytest.mark.parametrize("slug", [r.slug for r in all_rules()])
def test_every_rule_has_a_case_that_fires_it_and_a_near_miss(slug):
    # GIVEN all golden cases THEN the rule fires in one and another is a look-alike it must stay quiet on
    assert any(slug in golden(c)[2]["fire"] for c in CASES), f"no case fires {slug}"
    assert any(slug in quiet_on(c) for c in CASES), f"no near miss for {slug}"


@pytest.mark.parametrize("name", [c for c in CASES if golden(c)[2]["verdict"] == "hang"
                                  and set(golden(c)[2]["fire"]) & set(ROOT_CAUSES)])
def test_a_root_cause_about_the_culprit_comes_before_the_generic_finding(name):
    # GIVEN a hang whose cause a root-cause rule names WHEN the report lists its findings
    _, report, expected = golden(name)
    rules = [f.rule for f in report.findings]
    cause = next(r for r in rules if r in ROOT_CAUSES)
    generic = next(r for r in rules if r in ("collective-straggler", "collective-mismatch"))
    # THEN the root cause comes first, is about the culprit, and the generic finding is kept
    assert rules.index(cause) < rules.index(generic)
    assert set(report.findings[rules.index(cause)].ranks) == set(expected["culprit_ranks"])


def test_slow_decompression_names_the_shard_its_rate_and_the_frames():
    # GIVEN rank 1's workers decompressing .tar.bz2 shards (a real job)
    _, report, _ = golden("bz2-shards")
    finding = next(f for f in report.findings if f.rule == "slow-decompression")
    # THEN the title names the shard and the MB/s, the evidence the file, the offsets and bz2 frames
    assert finding.ranks == (1,)
    assert ".tar.bz2 at " in finding.title and "MB/s" in finding.title and "bz2 shards starve" in finding.title
    assert any(".tar.bz2 (" in e and "MB/s" in e and "->" in e for e in finding.evidence)
    assert any("stack:" in e and "bz2.py" in e for e in finding.evidence)
    assert "uncompressed .tar" in finding.fix and "MB/s" in finding.fix


def test_slow_decompression_says_why_a_straggler_that_still_moves_is_late():
    # GIVEN rank 1 reading .tar.bz2 shards in order: the job steps, every step waits for rank 1 (a real job)
    _, report, _ = golden("bz2-straggler")
    finding = next(f for f in report.findings if f.rule == "slow-decompression")
    # THEN a warning, not a hang's critical: the shard, its rate, the share of the wait, the job's read line
    assert report.verdict == "slow" and finding.severity.value == "warning" and finding.ranks == (1,)
    assert ".tar.bz2 at " in finding.title and "make this rank the straggler" in finding.title
    assert "waits on its DataLoader in" in finding.evidence[0] and "of every step" in finding.evidence[0]
    assert any("stack:" in e and "BZ2File.read" in e and "read_sequential (hangdoc/scenarios/" in e
               for e in finding.evidence)
    # AND slow-rank, which says what it costs, comes with it
    assert "slow-rank" in [f.rule for f in report.findings]


def test_worker_error_points_at_the_decode_branch():
    # GIVEN a worker that raised KeyError: 'sample_rate'
    _, report, _ = golden("worker-keyerror")
    finding = next(f for f in report.findings if f.rule == "worker-error")
    # THEN the exception, its frames and the decode-branch hint are cited
    assert finding.title == "DataLoader worker 0 of rank 1 raised KeyError: 'sample_rate'"
    assert any("resample" in e for e in finding.evidence)
    assert "every branch" in finding.fix


def test_oom_kill_names_the_signal_and_memory():
    _, report, _ = golden("worker-oom")
    finding = next(f for f in report.findings if f.rule == "worker-died")
    assert "Killed" in finding.title and finding.ranks == (1,)
    assert any("resident memory" in e for e in finding.evidence)
    assert "OOM killer" in finding.fix and "prefetch_factor" in finding.fix


def test_decompression_of_data_held_in_memory_blames_no_shard():
    # GIVEN the bz2-shards job's bundle with rank 1's workers holding no compressed file open (the
    # same bz2 frames: records decompressed from memory, as a dataset of compressed blobs does)
    import dataclasses

    from hangdoc.model import Role
    bundle, _, _ = golden("bz2-shards")
    workers = {p.pid for p in bundle.job.processes if p.role is Role.WORKER}

    def no_files(sample):
        if sample.pid not in workers or sample.proc is None:
            return sample
        return dataclasses.replace(sample, proc=dataclasses.replace(sample.proc, open_files=()))
    edited = dataclasses.replace(bundle, samples=tuple(
        dataclasses.replace(s, processes=tuple(no_files(p) for p in s.processes)) for s in bundle.samples))
    # WHEN judged
    report = judge(edited).report
    finding = next(f for f in report.findings if f.rule == "slow-decompression")
    # THEN it says the data is decompressed in memory, names no shard, and its fix re-packs none
    assert "held in memory" in finding.title and "shards" not in finding.title, finding.title
    assert "uncompressed .tar" not in finding.fix and "ahead of training" in finding.fix
