"""A corpus of secrets planted where a job keeps them (environment, argv, exception texts, open
files' paths, integer locals) reaches no output format and not the saved bundle."""
from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from hangdoc.base.redact import filter_env, redact_cmdline, redact_lines, redact_text
from hangdoc.base.serde import from_dict, to_dict
from hangdoc.bundle.files import load_bundle, save_bundle
from hangdoc.collect.loopmark import frame_mark
from hangdoc.model import Bundle, Finding, LoopMark, Severity
from hangdoc.render.html import report_html
from hangdoc.render.json import report_json
from hangdoc.render.junit import junit_xml
from hangdoc.render.markdown import report_markdown
from hangdoc.render.text import render_text
from hangdoc.render.trace import report_trace
from hangdoc.report import judge

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
HEX_KEY = "0123456789abcdef0123456789abcdef01234567"          # a W&B key: 40 hex
B64_KEY = "QWxhZGRpbjpvcGVuIHNlc2FtZQQWxhZGRpbjpvcGVuIHNl"    # base64, no telling prefix
SECRETS = {
    "env TORCH_DB_PASS": "Hunter2Sekrit",
    "env NCCL_PROXY_PASS": "proxyPw0rd",
    "argv --wandb-key": HEX_KEY,
    "argv --auth-key": B64_KEY,
    "exception text": "89abcdef0123456789abcdef0123456789abcdef",
    "open file path": "feedfacefeedfacefeedfacefeedface",
    "secret_pin local": "482913",
}
ARGV = ["torchrun", "train.py", "--wandb-key", HEX_KEY, "--auth-key", B64_KEY]
EXCEPTION = f"ValueError: the API rejected key {SECRETS['exception text']}"


def planted_bundle() -> Bundle:
    """A golden bundle carrying each secret as the collectors would hand it over."""
    data = to_dict(load_bundle(GOLDEN / "barrier-mismatch" / "bundle.json"))
    env = filter_env({"TORCH_DB_PASS": SECRETS["env TORCH_DB_PASS"], "NCCL_PROXY_PASS": SECRETS["env NCCL_PROXY_PASS"],
                      "NCCL_DEBUG": "INFO"})
    for proc in data["job"]["processes"]:
        proc["env"] = {**proc["env"], **env}
        proc["cmdline"] = list(redact_cmdline(ARGV))
    data["logs"] = [{"source": "rank0.log", "lines": list(redact_lines(["step 3", EXCEPTION])), "mtime": None}]
    mark = LoopMark(frames=(frame_mark({"name": "main", "line": 9, "locals": [
        {"name": "step", "repr": "3", "addr": 1}, {"name": "secret_pin", "repr": SECRETS["secret_pin local"], "addr": 2}]}),))
    for sample in data["samples"]:
        for proc in sample["processes"]:
            if proc.get("proc"):
                proc["proc"]["open_files"] = [{"fd": 7, "path": f"/data/run-{SECRETS['open file path']}/shard-0.tar",
                                               "pos": 0, "size": 10, "mode": "r"}]
            for thread in (proc.get("stack") or {}).get("threads", []):
                if thread["name"] == "MainThread":
                    thread["loop"] = to_dict(mark)
    return from_dict(Bundle, data)


def leaked(text: str) -> list[str]:
    return [where for where, secret in SECRETS.items() if secret in text]


def test_an_integer_local_named_like_a_secret_is_no_loop_counter():
    # GIVEN a frame of the job's loop with `step` and `secret_pin` WHEN its mark is read
    mark = frame_mark({"name": "main", "line": 9, "locals": [
        {"name": "step", "repr": "3", "addr": 1}, {"name": "secret_pin", "repr": "482913", "addr": 2}]})
    # THEN the counter is kept, the secret is not
    assert mark.counters == (("step", 3),)


def test_allowlisted_names_that_say_pass_are_redacted():
    # GIVEN allowlisted prefixes carrying passwords in `_PASS` names WHEN filtered THEN redacted
    env = filter_env({"TORCH_DB_PASS": "hunter2", "NCCL_PROXY_PASS": "x", "NCCL_DEBUG": "INFO"})
    assert env == {"NCCL_DEBUG": "INFO", "NCCL_PROXY_PASS": "<redacted>", "TORCH_DB_PASS": "<redacted>"}


def test_the_saved_bundle_holds_no_secret_and_is_private(tmp_path):
    # GIVEN the planted bundle WHEN saved (plain JSON, to read its bytes)
    path = save_bundle(planted_bundle(), tmp_path / "b.json")
    # THEN none of the secrets is in the file, and only its owner may read it
    assert leaked(path.read_text()) == []
    assert path.stat().st_mode & 0o777 == 0o600


def outputs() -> dict[str, str]:
    bundle = planted_bundle()
    report = judge(bundle).report
    report = dataclasses.replace(report, findings=report.findings + (Finding(
        rule="collective-mismatch", severity=Severity.CRITICAL, ranks=(0,), title=EXCEPTION,
        evidence=(EXCEPTION, " ".join(ARGV)), fix="see the log"),))
    text = io.StringIO()
    render_text(report, text)
    markdown = report_markdown(report)
    return {"text": text.getvalue(), "markdown": markdown, "json": report_json(report),
            "junit": junit_xml(report, ARGV), "html": report_html(report), "trace": report_trace(report),
            "step summary": markdown}


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "junit", "html", "trace", "step summary"])
def test_no_planted_secret_reaches_any_output_format(fmt):
    # GIVEN secrets in env, argv, an exception's text, a path and a local WHEN rendered THEN none shows
    assert leaked(outputs()[fmt]) == []


@pytest.mark.parametrize("text", [
    "sha 9f0c4d2a11b7e5c3",                      # a stack key (16 hex) is not a key
    "step 10 loss 1.5231 key=label",             # a short value after "key"
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "num_tokens=4096",
])
def test_what_only_looks_near_a_secret_survives(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("text", [
    "wandb login" + " --a" * 40 + " -",          # exponential before: 2^40 ways to split the flags
    "a." * 50_000, "pass" * 25_000, "x" * 100_000, "key-" * 25_000, "eyJ" * 33_000,
    "--" + "pass" * 25_000, '"' + "pass" * 25_000, "-----BEGIN " + "PRIVATE KEY " * 8_000,
])
def test_redaction_costs_time_linear_in_the_text(text):
    import time

    # GIVEN a 100 KB line shaped against the patterns (a job's log line, a frame name in a stranger's dump)
    # WHEN it is redacted as a log line, a report field and a command-line word
    began = time.monotonic()
    redact_lines([text])
    redact_cmdline([text])
    # THEN it takes well under a second, not minutes (quadratic) or forever (exponential)
    assert time.monotonic() - began < 2.0


@pytest.mark.parametrize("text, kept", [
    ("wandb login --relogin 0123456789abcdef0123456789abcdef01234567", "wandb login --relogin <redacted>"),
    ("db.password=Hunter2Sekrit", "db.password=<redacted>"),
    ('{"api_key": "sk_live_abc"}', '{"api_key": "<redacted>"}'),
    ("--hf-token abc123", "--hf-token <redacted>"),
    ("use --wandb-key " + HEX_KEY, "use --wandb-key <redacted>"),
    ("https://user:pw@example.com/x", "https://<redacted>@example.com/x"),
])
def test_the_linear_patterns_still_redact_what_they_did(text, kept):
    assert redact_text(text) == kept
