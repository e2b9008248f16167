"""`hangdoc run` of a failing job whose argv, environment, thread name and output carry credentials
in the shapes the redactor once missed (issue 45, item 2): none reaches the report, the bundle, the
JUnit file or the GitHub step summary."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import hangdoc_cmd

pytestmark = [pytest.mark.integration]

SECRETS = {
    "sas": "Zm9vYmFyU2FzU2ln", "cookie": "CookieVal42", "set-cookie": "SetCookie43", "netrc": "NetrcPw44",
    "userinfo": "UserinfoTok45", "passphrase": "Passphrase46", "mysql": "MysqlPw47", "redis": "RedisPw48",
    "aws": "AwsSecret49",
}
JOB = f"""
import sys, threading, time
threading.Thread(target=time.sleep, args=(30,), daemon=True,
                 name="upload https://a.blob.core.windows.net/c/b?sp=r&sig={SECRETS['sas']}").start()
print("GET https://a.blob.core.windows.net/c/b?sv=2022&sig={SECRETS['sas']}")
print("Cookie: session={SECRETS['cookie']}")
print("Set-Cookie: sid={SECRETS['set-cookie']}; HttpOnly")
print("machine db.example.com login app password {SECRETS['netrc']}")
print("git clone https://{SECRETS['userinfo']}@github.com/org/repo.git")
print("running mysql -h db -uroot -p{SECRETS['mysql']} app and redis-cli -a {SECRETS['redis']} ping")
print("AWS_SECRET_ACCESS_KEY={SECRETS['aws']}", flush=True)
time.sleep(3)
sys.exit("RuntimeError: the upload failed")
"""


@pytest.mark.timeout(120)
def test_no_credential_of_the_new_shapes_leaves_run(tmp_path):
    # GIVEN a job that prints, names and is given credentials of each shape, then fails
    bundle, junit, summary = tmp_path / "b.json", tmp_path / "j.xml", tmp_path / "summary.md"
    summary.write_text("")
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200", GITHUB_STEP_SUMMARY=str(summary),
               NCCL_NETRC=f"machine h login u password {SECRETS['netrc']}")
    # WHEN `hangdoc run` watches it to its end
    done = subprocess.run([*hangdoc_cmd(), "run", "--no-gpu", "--interval", "0.5", "--format", "json",
                           "--out", str(bundle), "--junit", str(junit), "--",
                           sys.executable, "-c", JOB, "--key-passphrase", SECRETS["passphrase"]],
                          capture_output=True, text=True, timeout=90, env=env)
    # THEN it failed as a crash, and no secret is in its report, bundle, JUnit file or step summary
    assert done.returncode == 4, done.stderr[-3000:]
    outputs = {"report": done.stdout, "bundle": bundle.read_text(), "junit": junit.read_text(),
               "step summary": summary.read_text()}
    assert "crash" in outputs["report"] and "upload" in outputs["bundle"] and outputs["step summary"]
    leaked = [(where, name) for where, text in outputs.items() for name, secret in SECRETS.items() if secret in text]
    assert leaked == []
