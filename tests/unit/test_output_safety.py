"""Nothing leaks and nothing escapes, in every output format: a corpus of secret shapes and of
control characters / markup through text, Markdown, JSON, JUnit and the GitHub step summary."""
from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from hangdoc.report import judge
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Bundle, Finding, Severity
from hangdoc.base.redact import filter_env, redact_cmdline, redact_lines, redact_text
from hangdoc.render.escape import redact_tree
from hangdoc.render.json import report_json
from hangdoc.render.junit import junit_xml
from hangdoc.render.live import live_table
from hangdoc.render.markdown import report_markdown
from hangdoc.render.text import render_text
from hangdoc.base.serde import from_dict, to_dict

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

# (text as a job or a user would write it, the secret inside it)
SECRET_SHAPES = [
    ("password=Hunter2Sekrit", "Hunter2Sekrit"),
    ("PASSWORD=Hunter2Sekrit", "Hunter2Sekrit"),
    ("db passwd=Hunter2Sekrit ok", "Hunter2Sekrit"),
    ("api_key=k3y-Val-9q", "k3y-Val-9q"),
    ("API-KEY: k3y-Val-9q", "k3y-Val-9q"),
    ("secret=s3cr3tValue", "s3cr3tValue"),
    ("token=tok3nValue", "tok3nValue"),
    ("export HF_TOKEN=hf_abcdEFGHijklMNOPqrst1234", "hf_abcdEFGHijklMNOPqrst1234"),
    ('{"password": "Hunter2Sekrit", "user": "me"}', "Hunter2Sekrit"),
    ("{'api_key': 'k3y-Val-9q'}", "k3y-Val-9q"),
    ("wandb login 0123456789abcdef0123456789abcdef01234567", "0123456789abcdef0123456789abcdef01234567"),
    ("wandb login --relogin 0123456789abcdef0123456789abcdef01234567", "0123456789abcdef0123456789abcdef01234567"),
    ("huggingface-cli login --token hf_abcdEFGHijklMNOPqrst1234", "hf_abcdEFGHijklMNOPqrst1234"),
    ("--hf_token hf_abcdEFGHijklMNOPqrst1234", "hf_abcdEFGHijklMNOPqrst1234"),
    ("--password=Hunter2Sekrit", "Hunter2Sekrit"),
    ("--db-pass Hunter2Sekrit", "Hunter2Sekrit"),
    ("DB_PASS=Hunter2Sekrit", "Hunter2Sekrit"),
    ("--api-key sk-abcdefghijklmnopqrstuv", "sk-abcdefghijklmnopqrstuv"),
    ("fetch https://user:Hunter2Sekrit@example.com/data.tar", "Hunter2Sekrit"),
    ("Authorization: Bearer abc123def456ghi789", "abc123def456ghi789"),
    ("AWS key AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
    ("github ghp_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijk", "eyJhbGciOiJIUzI1NiJ9"),
    ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7Ab1\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA7Ab1"),
]
# Must survive: ordinary training output and code.
BENIGN = ["step 10 loss 1.5231 t=0.20s", "tokenizer=bert-base", "max_tokens=512", "KeyError: 'token'",
          'File "/data/train.py", line 3, in <module>', "lr=3e-4 world_size=8", "password reset link sent", "--passes 3", "bypass=1", "compass: north"]
HOSTILE = "\x1b]0;pwned\x07\x1b[2J<script>x</script>|cell\nnew line\x9b31m\u202eevil`code`"


@pytest.mark.parametrize("text,secret", SECRET_SHAPES)
def test_every_secret_shape_is_redacted(text, secret):
    # GIVEN a line holding a secret WHEN redacted THEN the secret is gone
    assert secret not in "\n".join(redact_lines(text.split("\n")))
    assert secret not in redact_text(text)


@pytest.mark.parametrize("text", BENIGN)
def test_ordinary_output_survives(text):
    assert redact_text(text) == text


def test_env_and_command_lines_use_the_same_redaction():
    # GIVEN secrets in allowlisted env values and in command-line words
    env = filter_env({"NCCL_DEBUG": "INFO", "TORCH_EXTRA": "password=Hunter2Sekrit", "MASTER_ADDR": "h"})
    argv = redact_cmdline(["train.py", "--password=Hunter2Sekrit", "--hf_token", "x1", "--db",
                           "postgres://u:Hunter2Sekrit@h/d", "--api-key", "sk-abcdefghijklmnopqrstuv"])
    # THEN neither keeps them, and the harmless values stay
    assert "Hunter2Sekrit" not in json.dumps(env) and env["NCCL_DEBUG"] == "INFO"
    assert not any(s in " ".join(argv) for s in ("Hunter2Sekrit", "x1", "sk-abcdefghijklmnopqrstuv"))


def hostile_bundle(name: str = "barrier-mismatch") -> Bundle:
    """A golden bundle whose frame and thread names carry secrets, escape sequences and markup."""
    data = to_dict(load_bundle(GOLDEN / name / "bundle.json"))
    poison = HOSTILE + " " + " ".join(text for text, _ in SECRET_SHAPES)
    for sample in data["samples"]:
        for proc in sample["processes"]:
            for thread in (proc.get("stack") or {}).get("threads", []):
                thread["name"] = poison
                if thread["frames"]:
                    thread["frames"][0]["name"] = poison
    return from_dict(Bundle, data)


def outputs() -> dict[str, str]:
    bundle = hostile_bundle()
    report = judge(bundle).report
    poison = HOSTILE + " " + " ".join(text for text, _ in SECRET_SHAPES)
    report = dataclasses.replace(report, findings=report.findings + (Finding(
        rule="collective-mismatch", severity=Severity.CRITICAL, ranks=(1,), title=poison,
        evidence=(poison, "rank 1 at <module> (train.py:3)"), fix=poison),))
    text = io.StringIO()
    render_text(report, text)
    cmd = ["torchrun", "train.py", *[word for shape, _ in SECRET_SHAPES if shape.startswith("--")
                                      for word in shape.split()], "--note", HOSTILE]
    return {"text": text.getvalue(), "markdown": report_markdown(report), "json": report_json(report),
            "junit": junit_xml(report, cmd)}


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "junit"])
def test_no_secret_shape_reaches_any_output_format(fmt):
    # GIVEN secrets in frame names, thread names, findings and the command line
    # WHEN the report is rendered in each format THEN none of the secrets is in it
    out = outputs()[fmt]
    leaked = [secret for _, secret in SECRET_SHAPES if secret in out]
    assert not leaked


@pytest.mark.parametrize("fmt", ["text", "markdown", "junit"])
def test_control_characters_never_reach_an_output(fmt):
    # GIVEN escape sequences (clear screen, set title), C1 CSI and a bidi override in names
    out = outputs()[fmt]
    # THEN no control character but newline survives
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]", out)


def test_json_escapes_control_characters_itself():
    out = outputs()["json"]
    assert "\x1b" not in out and json.loads(out)


def test_the_json_laid_out_by_msgspec_is_what_json_dumps_writes_byte_for_byte():
    # GIVEN a report of hostile text, and the same with a NaN, which msgspec does not read as JSON
    report = judge(hostile_bundle()).report
    odd = dataclasses.replace(report, detected_after_s=float("nan"))
    # WHEN each is written as JSON THEN it is json.dumps's own document, indent and escapes alike
    for each in (report, odd):
        assert report_json(each) == json.dumps(redact_tree(to_dict(each)), indent=2)


def test_markdown_has_no_raw_html_and_unbroken_tables():
    md = outputs()["markdown"]
    outside_code = re.sub(r"```.*?```", "", md, flags=re.S)
    outside_code = re.sub(r"`[^`\n]*`", "", outside_code)
    # THEN no tag opens outside code (<module>, <script> are shown, not interpreted)
    assert not re.search(r"<(?!details>|/details>|summary>|/summary>)[A-Za-z/!?]", outside_code)
    # AND every table row has as many unescaped cell separators as the header
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    header = len(re.findall(r"(?<!\\)\|", rows[0]))
    assert all(len(re.findall(r"(?<!\\)\|", row)) == header for row in rows), rows


def test_junit_is_valid_xml_and_names_the_redacted_command():
    # GIVEN the JUnit result of a run whose command line holds secrets and control characters
    root = ET.fromstring(outputs()["junit"].split("?>", 1)[1])
    name = root.find("testcase").get("name")
    # THEN it parses, and the test case name is the redacted command
    assert "--password=<redacted>" in name and "Hunter2Sekrit" not in name


def test_live_view_at_80_columns_keeps_rank_and_for():
    from rich.console import Console

    bundle = load_bundle(GOLDEN / "bz2-shards" / "bundle.json")
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(live_table(judge(bundle).report, 80))
    lines = console.file.getvalue().splitlines()
    assert lines[1].split()[:3] == ["RANK", "STATE", "FOR"]
    assert max(len(line) for line in lines) <= 80
    assert [line.split()[0] for line in lines[2:] if not line.startswith(" ")] == ["0", "1"]


def test_piped_text_is_not_wrapped(monkeypatch):
    # GIVEN a finding whose fix is a long command WHEN the report goes to a pipe (not a TTY)
    monkeypatch.setenv("COLUMNS", "80")
    bundle = load_bundle(GOLDEN / "bz2-shards" / "bundle.json")
    report = judge(bundle).report
    command = "hangdoc watch --job --out /a/very/long/path/" + "x" * 150 + "/bundle.json"
    report = dataclasses.replace(report, findings=(dataclasses.replace(report.findings[0], fix=command),))
    out = io.StringIO()
    render_text(report, out)
    # THEN the command is on one line, whole
    assert any(command in line for line in out.getvalue().splitlines())
