"""One-line usage errors, validated numbers, documented exit codes, explain for every slug, and
verdicts that do not claim more than the evidence holds."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hangdoc.registry import records
from hangdoc.report import judge
from hangdoc.bundle.files import load_bundle, save_bundle
from hangdoc.cli import main
from hangdoc.collect.stacks import PySpy, StackError
from hangdoc.render.words import headline

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
BUNDLE = GOLDEN / "barrier-mismatch" / "bundle.json"


def hangdoc(*args: str, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "hangdoc", *args], capture_output=True, text=True,
                          env=env, timeout=60, **kw)


@pytest.mark.parametrize("args", [
    ["watch", "--bogus"], ["report"], ["nosuch"], ["watch", "--interval", "abc", "1"],
    ["report", "--hang-after", "-5", str(BUNDLE)], ["report", "--hang-after", "nan", str(BUNDLE)],
    ["demo", "--interval", "0", "--hang-after", "-1"], ["watch", "--interval", "nan", "1"],
    ["watch", "--hang-after", "inf", "1"], ["run", "--timeout", "-1", "--", "true"],
])
def test_usage_errors_are_one_line_and_exit_2(args, capsys):
    # WHEN a command is misused THEN one line on stderr that says where the help is, exit 2
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hangdoc: error: ") and "--help" in err[0], err


def test_a_reader_leaving_early_keeps_the_verdicts_exit_code():
    # GIVEN `hangdoc report BUNDLE | head -0`: the reader is gone before the report is written
    env = dict(os.environ, NO_COLOR="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "hangdoc", "report", str(BUNDLE)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    # THEN the exit code is still the hang's (3), with no traceback
    assert proc.wait(60) == 3 and "Traceback" not in err and "Exception ignored" not in err, err


def printed_slugs() -> set[str]:
    """Every slug a command can print, from the registry, and the verdict words reports print."""
    return set(records()) | {"no-stack", "ended-unknown", "interrupted"}


@pytest.mark.parametrize("slug", sorted(printed_slugs()))
def test_explain_knows_every_slug_check_and_run_print(slug, capsys):
    assert main(["explain", slug]) == 0
    assert capsys.readouterr().out.startswith(f"# {slug}\n")


def test_exit_codes_page_lists_every_code():
    from hangdoc.base import errors

    page = (ROOT / "docs" / "exit-codes.md").read_text()
    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    for code in codes:
        assert f"| {code} |" in page, code


def without_evidence(name: str):
    """A golden bundle as seen when the job's output went to a terminal and the launcher is not ours."""
    bundle = load_bundle(GOLDEN / name / "bundle.json")
    return dataclasses.replace(bundle, logs=(), exit_code=None)


@pytest.mark.parametrize("name", ["healthy-finished"])
def test_ranks_vanishing_with_nothing_readable_is_not_healthy(name, tmp_path):
    # GIVEN every rank gone, no log and no exit status WHEN diagnosed
    bundle = without_evidence(name)
    report = judge(bundle).report
    # THEN never "healthy": a crash when the samples show one, else "ended, cause unknown" (exit 5)
    assert report.verdict in ("crash", "ended")
    if report.verdict == "ended":
        assert headline(report).startswith("ENDED, cause unknown")
        save_bundle(bundle, tmp_path / "b.json")
        assert main(["report", str(tmp_path / "b.json")]) == 5


def test_the_same_bundle_with_its_log_is_healthy():
    assert judge(load_bundle(GOLDEN / "healthy-finished" / "bundle.json")).report.verdict == "healthy"


def test_a_run_timeout_with_no_rank_does_not_claim_a_collective():
    from hangdoc.inputs.evidence import bundle_from_dumps
    from hangdoc.model import Ending
    from hangdoc.report.judge import End, judge

    empty = dataclasses.replace(bundle_from_dumps(()), samples=())
    report = judge(empty, End(Ending.TIMED_OUT, timeout_s=5, run=True)).report
    line = headline(report)
    assert "collective" not in line and "--timeout" in line


class Done:
    def __init__(self, returncode=0, stdout="", stderr=""):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.mark.parametrize("result,words", [
    (OSError(8, "Exec format error"), "does not run here"),
    (Done(0, "garbage, not json"), "not its JSON"),
    (Done(0, '{"not": "a list"}'), "not a list of threads"),
    (Done(0, "[1, 2]"), "not a list of threads"),
    (Done(-11, "", ""), "py-spy crashed (signal 11)"),
    (Done(1, "", "Error: Operation not permitted (os error 1)"), "ptrace refused"),
])
def test_every_py_spy_failure_says_why(result, words):
    # GIVEN a py-spy that fails in one of the ways seen in the field
    def run(cmd, **kw):
        if isinstance(result, Exception):
            raise result
        return result

    # WHEN a stack is read THEN the error names the cause
    with pytest.raises(StackError) as exc:
        PySpy("/usr/bin/py-spy", run=run).dump(os.getpid())
    assert words in str(exc.value)


def test_a_rank_without_a_stack_is_explained_in_the_report():
    from hangdoc.analyze.facts import missing_stacks
    from hangdoc.base.serde import from_dict, to_dict
    from hangdoc.model import Bundle

    data = to_dict(load_bundle(BUNDLE))
    ranks = {p["pid"] for p in data["job"]["processes"] if p["role"] == "rank"}
    last = data["samples"][-1]["processes"]
    victim = next(p for p in last if p["pid"] in ranks and p["alive"])
    victim["stack"] = None
    victim["errors"] = ["stack: could not collect: ptrace refused: process 4242 already traces pid 1"]
    lines = missing_stacks(from_dict(Bundle, data))
    assert len(lines) == 1 and "already traces" in lines[0]


def test_a_rank_exception_is_quoted_from_the_jobs_output():
    # GIVEN a crash whose only trace is rank 0's Python traceback in the job's output
    from hangdoc.model import LogTail
    from hangdoc.render.markdown import report_markdown
    from hangdoc.render.text import render_text
    import io

    bundle = load_bundle(GOLDEN / "worker-keyerror" / "bundle.json")
    lines = ("[rank0]: Traceback (most recent call last):",
             '[rank0]:   File "/job/train.py", line 10, in main',
             "[rank0]:     raise ValueError(f'bad lr {lr}')",
             "[rank0]: ValueError: bad lr -1",
             "Root Cause (first observed failure):", "[0]:", "  rank      : 0 (local_rank: 0)",
             "  exitcode  : 1 (pid: 1)")
    bundle = dataclasses.replace(bundle, logs=(LogTail("job.log", lines),))
    report = judge(bundle).report
    assert report.verdict == "crash" and report.culprit_ranks == (0,)
    # WHEN rendered THEN the exception and where it was raised are quoted
    out = io.StringIO()
    render_text(report, out)
    assert "rank 0 raised ValueError: bad lr -1" in out.getvalue()
    assert "train.py:10 in main: raise ValueError" in out.getvalue()
    assert "ValueError: bad lr -1" in report_markdown(report)
    # AND the JSON report carries the same lines: it says all the text says
    from hangdoc.render.json import report_json
    assert "rank 0 raised ValueError: bad lr -1" in json.loads(report_json(report))["cause"]
