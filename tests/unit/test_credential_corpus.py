"""A corpus of credentials, two or more of each class (the shapes of detect-secrets' plugins and
the ones an attack pushed through `run` and `watch`), each as an output line, a command line, an
environment value and a path segment, absent from the bundle's fields and from every output."""
from __future__ import annotations

import dataclasses
import io
import time
from pathlib import Path

import pytest

from hangdoc.base.redact import filter_env, redact_cached, redact_cmdline, redact_lines, redact_text
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Bundle, Finding, LogTail, Severity
from hangdoc.base.serde import from_dict, to_dict
from hangdoc.render.formats import OutputFormat, entry_of
from hangdoc.render.junit import junit_xml
from hangdoc.render.markdown import report_markdown
from hangdoc.report import judge

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

# class -> [(text, the secret in it)]
CORPUS: dict[str, list[tuple[str, str]]] = {
    "keyword, colon, no space": [("password:Qz7Kp2Wx9a", "Qz7Kp2Wx9a"), ("passwd:Qz7Kp2Wx9b", "Qz7Kp2Wx9b")],
    "token and secret, colon": [("token:Tk9mZ3Lq1a", "Tk9mZ3Lq1a"), ("secret:Sc9mZ3Lq1b", "Sc9mZ3Lq1b")],
    "api key, colon": [("api_key:Ak9mZ3Lq1c", "Ak9mZ3Lq1c"), ("apikey:Ak9mZ3Lq1d", "Ak9mZ3Lq1d")],
    "curl --user": [("curl --user admin:Cu9mZ3Lq1e https://h/x", "Cu9mZ3Lq1e"),
                    ("curl -u admin:Cu9mZ3Lq1f https://h/x", "Cu9mZ3Lq1f"),
                    ("train.py --user admin:Cu9mZ3Lq1g", "Cu9mZ3Lq1g")],
    "curl --proxy-user": [("curl --proxy-user me:Pu9mZ3Lq1g https://h", "Pu9mZ3Lq1g"),
                          ("curl -U me:Pu9mZ3Lq1h https://h", "Pu9mZ3Lq1h")],
    "URL user part with @": [("https://me@corp:Ua9mZ3Lq1i@host/x", "Ua9mZ3Lq1i"),
                             ("ftp://a@b:Ua9mZ3Lq1j@host/", "Ua9mZ3Lq1j")],
    "URL-encoded userinfo": [("https://me%40corp:Ue9mZ3Lq1k@host", "Ue9mZ3Lq1k"),
                             ("https://u:Ue9mZ3Lq1l%21@host/x", "Ue9mZ3Lq1l")],
    "Docker config auth": [('{"auths": {"r.io": {"auth": "RG9ja2VyOkF1dGg5bVo"}}}', "RG9ja2VyOkF1dGg5bVo"),
                           ('"auth":"RG9ja2VyQXV0aDJ4WQ"', "RG9ja2VyQXV0aDJ4WQ")],
    "Bearer with a colon": [("Bearer: Br9mZ3Lq1m", "Br9mZ3Lq1m"), ("bearer: Br9mZ3Lq1n", "Br9mZ3Lq1n")],
    "access_token then a space": [("access_token At9mZ3Lq1o", "At9mZ3Lq1o"),
                                  ("refresh_token Rt9mZ3Lq1p", "Rt9mZ3Lq1p")],
    "openssl -k and pass:": [("openssl enc -aes-256-cbc -k Os9mZ3Lq1q -in f", "Os9mZ3Lq1q"),
                             ("openssl enc -d -pass pass:Os9mZ3Lq1r -in f", "Os9mZ3Lq1r")],
    "az login -p": [("az login -u me -p Az9mZ3Lq1s", "Az9mZ3Lq1s"),
                    ("az login --service-principal -u app -p Az9mZ3Lq1t --tenant t", "Az9mZ3Lq1t")],
    "vault login": [("vault login Vt9mZ3Lq1u", "Vt9mZ3Lq1u"), ("vault login -no-print Vt9mZ3Lq1v", "Vt9mZ3Lq1v")],
    "htpasswd -b": [("htpasswd -b -c .htpasswd admin Hp9mZ3Lq1w", "Hp9mZ3Lq1w"),
                    ("htpasswd -nb admin Hp9mZ3Lq1x", "Hp9mZ3Lq1x")],
    "session ids": [("session_id=Ss9mZ3Lq1y", "Ss9mZ3Lq1y"), ("sessionid=Ss9mZ3Lq1z", "Ss9mZ3Lq1z")],
    "cookies": [('curl --cookie "sid=Ck9mZ3Lq2a" https://h', "Ck9mZ3Lq2a"), ("Cookie: sid=Ck9mZ3Lq2b", "Ck9mZ3Lq2b")],
    "Azure connection strings": [("DefaultEndpointsProtocol=https;AccountName=a;AccountKey=Ak9mZ3Lq2c==;", "Ak9mZ3Lq2c"),
                                 ("Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=Sa9mZ3Lq2d=", "Sa9mZ3Lq2d")],
    "kubeconfig client-key-data": [("client-key-data: LS0tKc9mZ3Lq2e", "LS0tKc9mZ3Lq2e"),
                                   ("    client-key-data: LS0tKc9mZ3Lq2f=", "LS0tKc9mZ3Lq2f")],
    "age secret keys": [("AGE-SECRET-KEY-1AG9MZ3LQ2GQQQQ", "AG9MZ3LQ2G"), ("key AGE-SECRET-KEY-1AG9MZ3LQ2HQQQQ", "AG9MZ3LQ2H")],
    "Stripe webhook secrets": [("whsec_Wh9mZ3Lq2i", "Wh9mZ3Lq2i"), ("WEBHOOK whsec_Wh9mZ3Lq2jAbc", "Wh9mZ3Lq2j")],
    "Google OAuth tokens": [("ya29.Ya9mZ3Lq2k", "Ya9mZ3Lq2k"), ("ya29.a0Ya9mZ3Lq2l-x", "Ya9mZ3Lq2l")],
    "Google API keys": [("AIzaGk9mZ3Lq2m", "Gk9mZ3Lq2m"), ("AIzaSyGk9mZ3Lq2nXYZ", "Gk9mZ3Lq2n")],
    "AWS": [("AKIAAW9MZ3LQ2O123456", "AW9MZ3LQ2O"), ("aws_secret_access_key=As9mZ3Lq2pQrStUvWx", "As9mZ3Lq2p")],
    "GitHub": [("ghp_Gh9mZ3Lq2qAAAAAAAAAAAAAAAAAAAAAAAAAA", "Gh9mZ3Lq2q"),
               ("github_pat_11Gh9mZ3Lq2rBBBBBBBBBBBBBBBBBBBB", "Gh9mZ3Lq2r")],
    "GitLab": [("glpat-Gl9mZ3Lq2sXXXXXXXX", "Gl9mZ3Lq2s"), ("glsoat-Gl9mZ3Lq2t", "Gl9mZ3Lq2t")],
    "Slack": [("xoxb-123-Sl9mZ3Lq2u", "Sl9mZ3Lq2u"), ("https://hooks.slack.com/services/T000/B000/Sl9mZ3Lq2v", "Sl9mZ3Lq2v")],
    "Stripe keys": [("sk_live_St9mZ3Lq2w", "St9mZ3Lq2w"), ("rk_live_St9mZ3Lq2x", "St9mZ3Lq2x")],
    "JWTs": [("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.Jw9mZ3Lq2y", "Jw9mZ3Lq2y"), ("eyJhbGci.eyJzdWIi.Jw9mZ3Lq2z", "Jw9mZ3Lq2z")],
    "private key blocks": [("-----BEGIN PRIVATE KEY----- Pk9mZ3Lq3a -----END PRIVATE KEY-----", "Pk9mZ3Lq3a"),
                           ("-----BEGIN OPENSSH PRIVATE KEY----- Pk9mZ3Lq3b", "Pk9mZ3Lq3b")],
    "basic-auth URLs": [("postgres://app:Pg9mZ3Lq3c@db/x", "Pg9mZ3Lq3c"), ("redis://:Pg9mZ3Lq3d@cache:6379", "Pg9mZ3Lq3d")],
    "high entropy in a value position": [("ref=Hq8Rt3Lm9Wz2Kp5Vn7Bc4JxYd", "Hq8Rt3Lm9Wz2Kp5Vn7Bc4JxYd"),
                                         ("blob: 'Zr4Tq8Wm2Lp6Xn9Kv3Bd7Hj'", "Zr4Tq8Wm2Lp6Xn9Kv3Bd7Hj")],
    "signatures": [("sig=Sg9mZ3Lq3e", "Sg9mZ3Lq3e"), ("signature=Sg9mZ3Lq3f", "Sg9mZ3Lq3f")],
    "npm auth": [("//registry.npmjs.org/:_authToken=Np9mZ3Lq3i", "Np9mZ3Lq3i"), ("_auth=Np9mZ3Lq3j", "Np9mZ3Lq3j")],
    "SendGrid": [("SG.Sg9mZ3Lq3kAAAAAAAA.Bb9mZ3Lq3lBBBBBBBB", "Sg9mZ3Lq3k"), ("key SG.Sg9mZ3Lq3mCCCCCCCC.Dd9mZ3Lq3nDDDDDD", "Sg9mZ3Lq3m")],
}
INSTANCES = [(cls, text, secret) for cls, items in CORPUS.items() for text, secret in items]
IDS = [f"{cls}:{secret}" for cls, _, secret in INSTANCES]


def test_the_corpus_is_large_enough():
    assert len(CORPUS) >= 30 and len(INSTANCES) >= 60


@pytest.mark.parametrize("cls,text,secret", INSTANCES, ids=IDS)
def test_each_credential_is_gone_from_every_field_a_bundle_holds(cls, text, secret):
    # GIVEN a credential WHEN it is an output line, a command line (its words, or one `sh -c` word),
    # an allowlisted environment variable's value or a folder of a script's path
    forms = {
        "output line": "\n".join(redact_lines([text])),
        "argv": " ".join(redact_cmdline(["python", *text.split()])),
        "argv as one word": " ".join(redact_cmdline(["sh", "-c", text])),
        "env value": str(filter_env({"TORCH_EXTRA": text})),
        "path segment": redact_cached(f"/home/u/{text}/train.py"),
        "text": redact_text(text),
    }
    # THEN none of them keeps it
    assert {form: out for form, out in forms.items() if secret in out} == {}


def poisoned_report():
    """A golden's report whose frames, thread names, output lines, command lines and findings hold
    every credential of the corpus, raw (as a stranger's bundle could)."""
    data = to_dict(load_bundle(GOLDEN / "barrier-mismatch" / "bundle.json"))
    texts = [text for _, text, _ in INSTANCES]
    for sample in data["samples"]:
        for proc in sample["processes"]:
            for thread in (proc.get("stack") or {}).get("threads", []):
                for frame, text in zip(thread["frames"], texts):
                    frame["name"] = text
                    frame["filename"] = f"/home/u/{text}/train.py"
    for proc in data["job"]["processes"]:
        proc["cmdline"] = ["python", "train.py", *texts]
    bundle = from_dict(Bundle, data)
    bundle = dataclasses.replace(bundle, logs=(LogTail(source="<output of the command>", lines=tuple(texts)),))
    report = judge(bundle).report
    return dataclasses.replace(report, findings=report.findings + (Finding(
        rule="collective-mismatch", severity=Severity.CRITICAL, ranks=(1,), title=texts[0],
        evidence=tuple(texts), fix=" ".join(texts)),))


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    report = poisoned_report()
    outs = {}
    for fmt in OutputFormat:
        out = io.StringIO()
        entry_of(fmt).report()(report, out)
        outs[fmt.value] = out.getvalue()
    outs["step summary"] = report_markdown(report)
    for _, text, secret in INSTANCES:
        outs[f"junit {secret}"] = junit_xml(report, ["torchrun", "train.py", *text.split()])
    return outs


@pytest.mark.parametrize("cls,text,secret", INSTANCES, ids=IDS)
def test_each_credential_is_absent_from_every_output_format(rendered, cls, text, secret):
    # GIVEN a report whose every text holds the corpus WHEN rendered in every format, as the step
    # summary, and as the JUnit result of a command that holds the credential
    leaked = [name for name, out in rendered.items() if secret in out]
    # THEN the credential is in none of them
    assert leaked == []


@pytest.mark.parametrize("name", ["TORCH_COOKIE", "TORCH_SESSIONID", "TORCH_BEARER", "TORCH_JWT", "TORCH_PW",
                                  "TORCH_SIG", "NCCL_SIGNINGKEY", "TORCH_HMAC_KEY", "NCCL_AUTH", "TORCH_CRED",
                                  "TORCHELASTIC_SESSION", "NCCL_PASS"])
def test_an_allowlisted_name_that_says_what_it_holds_loses_its_value(name):
    assert filter_env({name: "plain"}) == {name: "<redacted>"}


@pytest.mark.parametrize("name,value", [("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"), ("NCCL_SOCKET_IFNAME", "eth0"),
                                        ("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT"),
                                        ("PYTHONPATH", "/opt/code:/opt/lib"), ("TORCH_HOME", "/data/torch"),
                                        ("NCCL_IB_HCA", "mlx5_0:1"), ("TORCH_DISTRIBUTED_DEBUG", "DETAIL")])
def test_harmless_allowlisted_names_keep_their_values(name, value):
    assert filter_env({name: value}) == {name: value}


@pytest.mark.parametrize("text", ["max_tokens=512", "token expired, retrying", "module:function", "rank:0",
                                  "https://registry.npmjs.org:443/@scope/pkg", "bypass=1", "signal: SIGTERM",
                                  "keyboard: us", "loss: 1.5231", "session started", "see www.example.com",
                                  "torch/distributed/distributed_c10d.py:5356"])
def test_ordinary_text_near_the_second_net_survives(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("text", ["x " + "a:" * 512, "x " + "a:" * 50_000, "password:" * 12_000, '"a":"' * 20_000,
                                  "https://a@" * 10_000, "--user a:" * 10_000, "access_token " * 8_000,
                                  "ref=" + "Zr4Tq8Wm2Lp6Xn9K" * 6_000])
def test_the_second_net_costs_time_linear_in_the_text(text):
    # GIVEN a 100 KB line shaped against the second net WHEN redacted THEN in well under 2 s, no recursion
    began = time.monotonic()
    redact_text(text)
    assert time.monotonic() - began < 2.0
