"""The credential shapes the redactor once missed (issue 45, item 2), by class and several of each:
query parameters named like signatures or tokens, every header that carries a credential, netrc,
URL userinfo of any shape, options whose names say secret whatever their separators, and the short
options of the common clients. Each is gone from a text, a log line, a command line's words and an
environment value hangdoc keeps: one redactor for every path."""
from __future__ import annotations

import time

import pytest

from hangdoc.base.redact import filter_env, redact_cmdline, redact_lines, redact_text

SAS = "sv=2022-11-02&ss=b&srt=sco&sp=rl&se=2026-01-01T00:00:00Z&sig=Zm9vYmFyYmF6cXV4%2Bqwe%3D"
CLASSES = {
    "query parameter": [
        (f"GET https://acct.blob.core.windows.net/c/blob?{SAS} HTTP/1.1", "Zm9vYmFyYmF6cXV4"),
        ("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=9f8e7d6c5b4a3&X-Amz-Date=1",
         "9f8e7d6c5b4a3"),
        ("https://b.s3.amazonaws.com/k?X-Amz-Security-Token=IQoJb3JpZ2luX2Vj&X-Amz-Expires=60", "IQoJb3JpZ2luX2Vj"),
        ("https://storage.googleapis.com/b/o?X-Goog-Signature=a1b2c3d4e5f6", "a1b2c3d4e5f6"),
        ("https://api.example.com/v1/items?access_token=tok3nValue&page=2", "tok3nValue"),
        ("fetch https://maps.example.com/api?key=mApK3yValue;format=json", "mApK3yValue"),
        ("wget 'http://h/x?user=bob&password=pAssW0rd9'", "pAssW0rd9"),
        ("callback https://app.example.com/cb?code=oauthC0de42&state=x", "oauthC0de42"),
    ],
    "header": [
        ("Cookie: session=abc123def; theme=dark", "abc123def"),
        ("Set-Cookie: sid=XyZ987qwe; Path=/; HttpOnly", "XyZ987qwe"),
        ("curl -H 'X-Auth-Token: aUtHt0ken' https://h", "aUtHt0ken"),
        ("X-Amz-Security-Token: FwoGZXIvYXdzEJr", "FwoGZXIvYXdzEJr"),
        ("PRIVATE-TOKEN: glpatshort1", "glpatshort1"),
        ('{"X-Goog-Api-Key": "gApiK3y", "Accept": "*/*"}', "gApiK3y"),
        ('headers={"cookie": "csrftoken=CsRf1234"}', "CsRf1234"),
    ],
    "netrc": [
        ("machine api.example.com login alice password S3cretPw", "S3cretPw"),
        ("machine h.example.org login bob account ops password 0psPass!", "0psPass!"),
        ("default login anonymous password guestPw7", "guestPw7"),
        ("login deploy password d3ployPw", "d3ployPw"),
        ("machine a login u password FirstPw machine b login v password SecondPw", "SecondPw"),
    ],
    "url userinfo": [
        ("git clone https://ghtoken1234567@github.com/org/repo.git", "ghtoken1234567"),
        ("pip install git+https://pAtValue99@gitlab.example.com/g/p.git", "pAtValue99"),
        ("redis://rEdisTok@cache:6379/0", "rEdisTok"),
        ("https://x-access:t0k@h/ and https://T0kenOnly@h/", "T0kenOnly"),
        ("amqps://sEcretUser@broker.example.com/vhost", "sEcretUser"),
    ],
    "secret-named option": [
        ("openssl pkcs12 --key-passphrase KeyPass1 -in a.p12", "KeyPass1"),
        ("tool --key_passphrase KeyPass2", "KeyPass2"),
        ("tool --keyPassphrase KeyPass3", "KeyPass3"),
        ("tool --DB.PASSWORD KeyPass4", "KeyPass4"),
        ("tool --client.secret KeyPass5", "KeyPass5"),
        ("openssl rsa -passin KeyPass6 -in k.pem", "KeyPass6"),
        ("psql --db-pass KeyPass7", "KeyPass7"),
        ("uploader --sig KeyPass8", "KeyPass8"),
        ("tool --storage-account-access-key KeyPass9", "KeyPass9"),
    ],
    "secret-named variable": [
        ("export MYSQL_PWD=MyEnvPw1 && mysql app", "MyEnvPw1"),
        ("AZURE_STORAGE_KEY=AzKey1value python up.py", "AzKey1value"),
        ("SMS_OTP: 918273", "918273"),
        ("otp_code=564738 accepted", "564738"),
        ("db_pwd = DbPwd77", "DbPwd77"),
        ("TORCH_DB_PASS=TorchPass5 torchrun train.py", "TorchPass5"),
    ],
    "client short option": [
        ("mysql -h db -uroot -pMyPw123 app", "MyPw123"),
        ("mysql -h db -u root -p MyPw456 app", "MyPw456"),
        ("mysqldump -u backup -pDumpPw1 --all-databases", "DumpPw1"),
        ("redis-cli -h cache -a RedisPw789 ping", "RedisPw789"),
        ("/usr/bin/redis-cli -aRedisPw790 info", "RedisPw790"),
        ("sshpass -p SshPw1 ssh host", "SshPw1"),
        ("ldapsearch -x -D cn=admin -w LdapPw1 -b dc=x", "LdapPw1"),
        ("zip -P ZipPw1 out.zip file", "ZipPw1"),
        ("docker login -u me -p DockPw1 registry.example.com", "DockPw1"),
        ("curl -u alice:CurlPw1 https://h", "CurlPw1"),
        ("mongosh --host db -u admin -p MongoPw1", "MongoPw1"),
    ],
}
SHAPES = [(cls, text, secret) for cls, items in CLASSES.items() for text, secret in items]
BENIGN = [
    "docker run -p 8080:80 image", "mysql -h db -P 3306 -e 'select 1'", "curl -o out.html https://example.com/",
    "zip -r out.zip dir", "https://example.com/search?q=tokens&page=2&sort=asc", "python train.py --max-tokens 512",
    "python train.py --pin-memory --num-workers 4", "the password is checked on login",
    "machine learning is fun", "git@github.com:org/repo.git", "https://example.com:8443/path",
    "Accept: application/json", "python train.py --tokenizer bert-base --author me",
    "NUM_TOKENS=4096 STEP=10 WORLD_SIZE=8", "step 10 loss 1.5231 key=label", "pin_memory=True batch_size=32",
]


@pytest.mark.parametrize("cls, text, secret", SHAPES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(SHAPES)])
def test_every_instance_of_each_class_is_redacted_on_every_path(cls, text, secret):
    # GIVEN a credential in one of its class's shapes
    # WHEN it passes as a text (a report field), a log line, a command line's words and an env value
    as_text = redact_text(text)
    as_line = "\n".join(redact_lines([text]))
    as_argv = " ".join(redact_cmdline(text.split()))
    as_env = " ".join(filter_env({"NCCL_SOCKET_IFNAME": text}).values())
    # THEN it is gone from each, and what stands around it stays
    for where, out in (("text", as_text), ("log line", as_line), ("argv", as_argv), ("env", as_env)):
        assert secret not in out, (where, out)
    assert text.split()[0].lstrip("'{\"") in as_text or "<redacted>" in as_text.split()[0]


def test_a_netrc_read_line_by_line_loses_its_password_line():
    # GIVEN a netrc as a log or a file shows it, one token pair a line
    lines = ["machine api.example.com", "  login alice", "  password LinePw1", "machine b", "password LinePw2"]
    # WHEN redacted as log lines THEN neither password is left, the machine and login are
    out = redact_lines(lines)
    assert "LinePw1" not in str(out) and "LinePw2" not in str(out)
    assert out[0] == lines[0] and out[1] == lines[1]


@pytest.mark.parametrize("text", BENIGN)
def test_ordinary_commands_and_urls_near_the_classes_survive(text):
    assert redact_text(text) == text
    assert redact_cmdline(text.split()) == tuple(text.split())


@pytest.mark.parametrize("text", [
    "?sig=" * 20_000, "&a" * 50_000, "Cookie: " * 12_000, "machine " * 12_000, "machine a login " * 6_000,
    "https://" + "a" * 100_000, "a://" * 25_000 + "@", "mysql -p" * 12_000, "mysql " + "-p " * 30_000,
    "--a " * 25_000, "x-" * 50_000 + "token", "password " * 11_000, "a=" * 50_000, "A_" * 50_000 + "=x",
    "PWD=1 " * 16_000,
])
def test_the_classes_cost_time_linear_in_the_text(text):
    # GIVEN a 100 KB line shaped against the new patterns
    for path in (lambda: redact_lines([text]), lambda: redact_cmdline([text]), lambda: redact_cmdline(text.split())):
        # WHEN redacted as a log line, a command-line word, a command line of its words
        began = time.monotonic()
        path()
        # THEN each in well under 2 s: linear, never quadratic
        assert time.monotonic() - began < 2.0
