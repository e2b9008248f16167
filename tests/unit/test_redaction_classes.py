"""Redaction by class, not by instance: every credential-bearing URL shape, auth header scheme,
secret-naming option, provider token prefix and secret-like name, wherever it comes from (env,
argv, logs, thread names, frame paths, data-list paths, locals), is gone before a bundle is
written; and each pattern stays linear in the text."""
from __future__ import annotations

import ctypes
import os
import threading
import time

import pytest

from hangdoc.base.redact import filter_env, redact_cmdline, redact_lines, redact_text, secret_name

# (text, the secret in it): one or more of each class
SHAPES = [
    # URLs with credentials: empty user, a '/' or ':' in the password, any scheme
    ("redis://:Pw4Redis@cache:6379/0", "Pw4Redis"),
    ("https://u:pa/ss@example.com/x", "pa/ss"),
    ("amqp://guest:gu:est@rabbit/", "gu:est"),
    ("mongodb+srv://admin:Sekrit@cluster0.example.net", "Sekrit"),
    ("postgresql://app:@db/x and ftp://:anon@host", "anon"),
    ("git+https://oauth2:glpatlikevalue@gitlab.example.com/x.git", "glpatlikevalue"),
    # auth headers, any scheme, with or without digits
    ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ("Authorization: Bearer abcdefghijklmnopqrstuv", "abcdefghijklmnopqrstuv"),
    ("curl -H 'Authorization: Token abcdefghijkl' url", "abcdefghijkl"),
    ('Authorization: Digest username="u", response="6629fae49393a053"', "6629fae49393a053"),
    ('{"Authorization": "ApiKey ZmFrZS1hcGkta2V5"}', "ZmFrZS1hcGkta2V5"),
    ("proxy-authorization: Negotiate YIIBhgYGKwYBBQUC", "YIIBhgYGKwYBBQUC"),
    ("sent bearer qwertyuiopasdfghjklzx to it", "qwertyuiopasdfghjklzx"),
    ("X-Api-Key: abcdefghijkl", "abcdefghijkl"),
    # options that name a secret, with = or a separate word
    ("--password hunter2", "hunter2"), ("--passwd=hunter2", "hunter2"), ("--pwd hunter2", "hunter2"),
    ("--token abc", "abc"), ("--api-key=xyz12", "xyz12"), ("--apikey xyz12", "xyz12"),
    ("--secret foo9", "foo9"), ("--client-secret foo9", "foo9"), ("--access-key AK1", "AK1"),
    ("--private-key-pass pk9", "pk9"), ("--credentials cr3d", "cr3d"), ("--auth-token at9", "at9"),
    # the token prefixes of common providers
    ("ghp_" + "A" * 36, "A" * 36), ("gho_" + "b" * 36, "b" * 36), ("ghu_" + "c" * 36, "c" * 36),
    ("ghs_" + "d" * 36, "d" * 36), ("ghr_" + "e" * 36, "e" * 36), ("github_pat_11ABC" + "f" * 60, "f" * 60),
    ("glpat-" + "g" * 20, "g" * 20), ("xoxb-123-abcdefghij", "abcdefghij"), ("xoxp-9-klmnopqrst", "klmnopqrst"),
    ("xoxs-9-uvwxyzabcd", "uvwxyzabcd"), ("xoxa-2-abcdefghij", "abcdefghij"), ("xoxr-2-abcdefghij", "abcdefghij"),
    ("AKIA" + "Q" * 16, "Q" * 16), ("ASIA" + "R" * 16, "R" * 16), ("AIza" + "S" * 35, "S" * 35),
    ("sk-" + "t" * 48, "t" * 48), ("sk-proj-" + "u" * 40, "u" * 40), ("hf_" + "v" * 34, "v" * 34),
    ("sk_live_" + "w" * 24, "w" * 24), ("rk_live_" + "x" * 24, "x" * 24), ("npm_" + "y" * 36, "y" * 36),
    ("pypi-AgEIcHlwaS5vcmc" + "z" * 40, "z" * 40),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlaGVyZQ", "c2lnbmF0dXJlaGVyZQ"),
    ("in /home/u/ghp_" + "H" * 36 + "/train.py", "H" * 36),
]
BENIGN = [
    "Basic usage: see the docs", "token expired, retrying", "bearer of bad news", "max_tokens=512",
    "https://registry.npmjs.org:443/@scope/pkg", "http://host:8080/path", "tokenizer=bert-base",
    "step 10 loss 1.52", "sklearn", "sk-learn", "hf_transfer enabled", "Authorization failed for user",
]


@pytest.mark.parametrize("text,secret", SHAPES)
def test_every_credential_class_is_redacted(text, secret):
    # GIVEN a credential in one of its shapes WHEN redacted as text, as a log line and as a command line
    words = text.split()
    # THEN it is gone from each
    assert secret not in redact_text(text), redact_text(text)
    assert secret not in "\n".join(redact_lines([text]))
    if text.startswith("--") or len(words) == 1:      # what a command line holds as its own words
        assert secret not in " ".join(redact_cmdline(words)), redact_cmdline(words)


@pytest.mark.parametrize("text", BENIGN)
def test_ordinary_words_near_a_class_survive(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("name", ["passcode", "pincode", "totp", "hotp", "cvv", "cvc", "otp", "pin", "user_pin",
                                  "otpCode", "userPin", "PinCode", "mfa_code", "secret_pin", "SMS_OTP"])
def test_names_of_one_time_secrets_are_secret(name):
    assert secret_name(name)


@pytest.mark.parametrize("name", ["step", "epoch", "spin", "pinned", "option", "top", "batch_idx", "spinning",
                                  "opt_step", "num_workers", "spinner", "pinyin"])
def test_counters_that_merely_contain_the_letters_are_not(name):
    assert not secret_name(name)


def test_env_values_of_every_url_shape_are_redacted():
    env = filter_env({"TORCH_STORE": "redis://:Pw4Redis@cache:6379/0", "NCCL_X": "https://u:pa/ss@h/x"})
    assert "Pw4Redis" not in str(env) and "pa/ss" not in str(env)


def test_one_time_secret_locals_are_not_kept_as_loop_counters():
    # GIVEN the locals py-spy printed for a frame of the job's own loop
    from hangdoc.collect.loopmark import frame_mark

    frame = {"name": "train", "line": 3, "locals": [
        {"name": n, "repr": "123456", "addr": 1} for n in ("step", "passcode", "pincode", "totp", "cvv", "otp", "pin")]}
    # WHEN its mark is taken THEN only the step is a counter
    assert frame_mark(frame).counters == (("step", 123456),)


def test_tokens_in_thread_names_and_script_paths_never_reach_a_stack():
    # GIVEN py-spy's JSON of a process whose script lives under a token-named directory and whose
    # thread is named with a token
    from hangdoc.collect.stacks import parse_dump

    token = "ghp_" + "K" * 36
    data = [{"thread_name": f"uploader-{token}", "os_thread_id": 7, "frames": [
        {"name": "main", "filename": f"/home/u/{token}/train.py", "short_filename": f"{token}/train.py", "line": 3,
         "locals": [{"name": "step", "repr": "4"}]}]}]
    # WHEN it is parsed into the capture
    dump = parse_dump(data, loop_locals=True)
    # THEN the token is in no thread name, file name or short name
    assert token not in repr(dump.stack) and "K" * 36 not in repr(dump.stack)
    assert dump.stack.threads[0].frames[0].filename.endswith("/train.py")


def test_a_token_cut_short_in_a_kernel_thread_name_is_redacted():
    # GIVEN a real thread whose name is a token: the kernel keeps its first 15 bytes (comm)
    from hangdoc.collect.procfs import ProcFS

    ready, done = threading.Event(), threading.Event()

    def named():
        ctypes.CDLL(None).prctl(15, b"ghp_ABCDEFGHIJKLMNOP", 0, 0, 0)
        ready.set()
        done.wait(10)

    thread = threading.Thread(target=named, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        # WHEN its process's thread names are read
        names = ProcFS().thread_names(os.getpid())
    finally:
        done.set()
        thread.join(10)
    # THEN the cut token is not among them, nor any part of it
    assert not any("ABCDEFGHIJK" in name for name in names), names


def test_log_and_data_list_paths_under_a_token_directory_are_redacted(tmp_path):
    # GIVEN a job logging to, and listing data under, a directory named by a token
    from hangdoc.collect.datalists import read_copy
    from hangdoc.collect.logs import read_tail

    secret_dir = tmp_path / ("ghp_" + "M" * 36)
    secret_dir.mkdir()
    log = secret_dir / "rank0.log"
    log.write_text("step 1\n")
    listing = secret_dir / "data.list"
    listing.write_text(f"{secret_dir}/shard_0.tar\n")
    # WHEN they are read for the bundle THEN the token is in neither
    assert "M" * 36 not in repr(read_tail(str(log))) and "M" * 36 not in repr(read_copy(str(listing)))


@pytest.mark.parametrize("text", [
    "redis://" + ":" * 50_000, "https://" + "a:" * 30_000, "Authorization: " + "Basic " * 15_000,
    "bearer " * 15_000, "xoxb-" * 20_000, "--client-secret" * 6_000, "a://b:c" * 12_000, "@" * 100_000,
])
def test_the_new_classes_cost_time_linear_in_the_text(text):
    # GIVEN a 100 KB line shaped against the new patterns WHEN redacted THEN well under a second or two
    began = time.monotonic()
    redact_lines([text])
    redact_cmdline([text])
    assert time.monotonic() - began < 2.0
