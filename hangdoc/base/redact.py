"""Keep secrets out of bundles and reports.

Environment variables survive only from an allowlist; even then a value that looks
like a credential is replaced. Command lines and log lines get the same value test.
"""
from __future__ import annotations

import functools
import re

from hangdoc.base.secret_net import second_net

REDACTED = "<redacted>"

_ALLOWED_NAMES = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "NODE_RANK", "HOSTNAME", "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NODEID", "SLURM_NTASKS",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK", "PMI_SIZE", "VIRTUAL_ENV", "CONDA_DEFAULT_ENV", "LD_PRELOAD",
    "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "TOKENIZERS_PARALLELISM",
}
_ALLOWED_PREFIXES = (
    "ROLE_", "MASTER_", "TORCHELASTIC_", "NCCL_", "TORCH_", "PYTHON", "GLOO_", "KMP_",
    "ACCELERATE_", "DEEPSPEED_",
)
# Even an allowed prefix does not make these safe (TORCH_HUB_TOKEN, NCCL_..._KEY, TORCH_DB_PASS), nor
# an integer local (`passcode`, `otpCode`): the long words anywhere, the short ones as whole parts of
# the name, parts split at `_`, digits and case changes (`_PASS`, `PWD`, `KEY_ID`, `userPin`, `totp`).
_SECRET_NAME = re.compile(r"TOKEN(?!S|IZ)|SECRET|PASSW|PASSPHRASE|PASSCODE|PINCODE|CREDENTIAL|AUTH|API_?KEY|PRIVATE",
                          re.I)
_NAME_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_SECRET_PARTS = frozenset({"pass", "pwd", "key", "keys", "pin", "pins", "otp", "totp", "hotp", "cvv", "cvv2", "cvc",
                           "mfa", "2fa", "ssn", "passcode", "pincode", "nonce", "salt", "pw", "sig", "sid"})
# The words a name holds its value by, whatever the prefix (`TORCH_COOKIE`, `TORCH_SESSIONID`,
# `TORCH_BEARER`, `NCCL_SIGNINGKEY`): anywhere in the name, or a part that ends in `key`.
_SECRET_WORDS = re.compile(r"COOKIE|SESSION|BEARER|JWT|HMAC|CRED|SIGNATURE|SIGNING|KEY(?:S)?(?:_|$)", re.I)

# Every pattern runs over text a job or a stranger's bundle controls (log lines, frame names, whole
# report fields): each tries a run of name characters from its start only, and (?=(X))\1 takes X once
# without backtracking into it (an atomic group, which Python before 3.11 lacks), so a line costs time
# linear in its length, never quadratic or exponential (`a.` * 50,000 took minutes, `wandb login`
# and 40 ` --a` forever).
# The token formats of common providers, by their fixed prefixes: Hugging Face, GitHub (personal,
# OAuth, user, server, refresh, fine-grained), AWS access keys, OpenAI and Anthropic, Slack, GitLab
# (personal, deploy, trigger, runner, OAuth), Google API keys, Stripe secret and restricted keys,
# npm, PyPI, and JWTs.
_TOKEN_PREFIX = (r"hf_|gh[pousr]_|github_pat_|AKIA|ASIA|sk-|sk_live_|sk_test_|rk_live_|rk_test_|xox[a-z]-|"
                 r"gl(?:pat|dt|ptt|rt|cbt|oas)-|AIza|npm_|pypi-|eyJ")
_SECRET_VALUE = re.compile(
    r"(?:hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|"
    r"(?:AKIA|ASIA)[A-Z0-9]{16}|sk-[A-Za-z0-9_-]{16,}|[sr]k_(?:live|test)_[A-Za-z0-9]{10,}|xox[a-z]-[A-Za-z0-9-]{10,}|"
    r"gl(?:pat|dt|ptt|rt|cbt|oas)-[A-Za-z0-9_-]{16,}|AIza[A-Za-z0-9_-]{30,}|npm_[A-Za-z0-9]{30,}|"
    r"pypi-[A-Za-z0-9_-]{16,}|"
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{5,})"
)
# A name the kernel cut at 15 bytes (a thread's comm) keeps a token's first characters only.
_TOKEN_STUB = re.compile(r"(?<![A-Za-z0-9])(?:" + _TOKEN_PREFIX + r")[A-Za-z0-9_-]*$")
COMM_BYTES = 15
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_LONG_RANDOM = re.compile(r"[A-Za-z0-9+/=_\-]{32,}")
# Userinfo in any scheme's URL, an empty user (`redis://:pw@h`) or a `/` or `:` in the password
# (`https://u:pa/ss@h`) included; `host:8080/path@x` (a port, then a path) is not a password. Each
# part is read at most 256 characters far, so a line of `a://b:c` repeated stays linear.
_URL_CREDENTIALS = re.compile(r"(?<![\w+.-])(?=([A-Za-z][\w+.-]*://))\1(?=([^\s/:@]{0,256}))\2:(?!\d{1,5}(?:/|$))"
                              r"(?=([^\s@]{0,256}))\3@")
# Userinfo without a colon: a token as the user (`https://TOKEN@host/`, as `git clone` takes it).
_URL_USER = re.compile(r"(?<![\w+.-])(?=([A-Za-z][\w+.-]*://))\1(?=([^\s/:@?#]{1,256}))\2@")
# A query parameter named like a signature, a token, a key or a password: an Azure SAS `sig=`, S3's
# `X-Amz-Signature=` and `X-Amz-Credential=`, `access_token=`, `api_key=`, `password=`, OAuth's `code=`.
_QUERY_PARAM = re.compile(r"([?&;])([\w.~-]{1,64})=([^&#\s\"'<>]+)")
_QUERY_SECRET = re.compile(r"(?i)sig|token|key|secret|pass|pwd|auth|credential|session|^code$")
# Every header that carries a credential, its value to the end of the line, whatever its scheme:
# `Authorization: Basic dXNlcjpwYXNz`, `"Authorization": "Token x"`, `Cookie:`, `Set-Cookie:`, `X-Api-Key:`,
# `X-Auth-Token:`, `X-Amz-Security-Token:`, GitLab's `PRIVATE-TOKEN:`.
# (Others than Authorization take a colon only: `X-Amz-Credential=` is a query parameter, below.)
_HEADER_NAME = (r"(?:set-)?cookie2?|private-token|"
                r"x-[\w-]{0,64}?(?:token|key|secret|auth|signature|credential|session|password)[\w-]{0,64}?|"
                r"[\w-]{0,64}?api-?key")
_AUTH_HEADER = re.compile(r"(?i)(?<![\w-])((?:(?:proxy-)?authori[sz]ation[\"']?\s*[:=]|(?:" + _HEADER_NAME +
                          r")[\"']?\s*:)\s*)(?=\S)[^\r\n]*")
# netrc: `machine H login U password P` (one line or several), `default login U password P`, a lone
# `password P` line of a netrc read line by line.
_NETRC = re.compile(r"(?i)(?<![\w-])((?:machine\s+(?=(\S+))\2|default|login\s+(?=(\S+))\3)"
                    r"(?:\s+(?:login|account|port)\s+(?=(\S+))\4){0,4}\s+password\s+)(\S+)")
_NETRC_LINE = re.compile(r"(?i)^(\s*password\s+)(\S+)(\s*)$")
# A value shaped like a key after a word or flag that says key: `--wandb-key X`, `auth: X`, `"key": "X"`.
_KEYISH = r"(?:key|auth|token|secret|pass(?:word|wd)?|pwd|credential)"
_KEYISH_FLAG = re.compile(r"^-(?=[\w-]*" + _KEYISH + r")[\w-]*$", re.I)
_KEY_RUN = r"[A-Za-z0-9+/_=.-]{32,}"
_KEYISH_VALUE = re.compile(r"(?i)((?<![\w-])(?=([\w-]*?" + _KEYISH + r"[\w-]*))\2[\"']?(?:\s*[=:]\s*|\s+)[\"']?)("
                           + _KEY_RUN + ")")
_HEX_RUN = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{32,}(?![0-9A-Za-z])")
# An option whose name says it takes a secret, whatever its separators and case: `--key-passphrase`,
# `--client_secret`, `--apiKey`, `--db.password`, `--hf-token`, `--pass`, `-pwd`, openssl's `-passin`.
_FLAG = re.compile(r"^(--?[A-Za-z][\w.-]{0,63})(=.*)?$", re.S)
_FLAG_WORDS = re.compile(r"passw|passphrase|passcode|secret|credential|token(?!iz|s)|api_?key|access_?key|"
                         r"private_?key|signature")
_FLAG_PARTS = frozenset({"pass", "pwd", "passin", "passout", "sig", "auth"})
# A name that says "secret" followed by its value, in free text: `password=...`, `PASSWD=...`,
# `api_key: ...`, `"password": "..."`, `--token X`, `Authorization: Bearer X`, `wandb login X`.
_NAME = r"[\w.-]*(?:passw(?:or)?d|passwd|passphrase|(?<![A-Za-z])pass(?![A-Za-z])|secret|token(?!iz|s\b)|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credential)[\w.-]*"
_QUOTED_PAIR = re.compile(r"""(?i)(["'](?=(""" + _NAME + r"""))\2["']\s*:\s*)(["'])(?:(?!\3)[^\\]|\\.)*\3""")
_PAIR = re.compile(r"(?i)(?<![\w.-])(?=(" + _NAME + r"))\1(\s*=\s*|\s*:\s+)(?![<\s])(\"[^\"]*\"|'[^']*'|[^\s\"',;&]+)")
# `NAME=value` in text where the name is an environment variable's (upper case) is judged by the very
# test the environment's names are (`MYSQL_PWD=`, `AZURE_STORAGE_KEY=`, `SMS_OTP=`); a lower-case one by
# the parts no setting merely contains (`otp_code=`, `db_pwd=`): one name test, not a narrower one.
_ANY_PAIR = re.compile(r"(?<![\w.-])([A-Za-z_][A-Za-z0-9_]{0,63})(\s*=\s*|\s*:\s+)(?![<\s])(\"[^\"]*\"|'[^']*'|[^\s\"',;&]+)")
_TEXT_PARTS = frozenset({"pwd", "passwd", "passcode", "pincode", "otp", "totp", "hotp", "cvv", "cvv2", "cvc", "mfa",
                         "2fa", "ssn"})
_FLAG_PAIR = re.compile(r"(?<!\S)(--?[A-Za-z][\w.-]{0,63})(\s+)(?!-)(\S+)")
# An auth scheme's word and its credential outside a header: `bearer X` (any scheme); a credential
# is 8+ characters with a digit, both cases or a token sign (`+/=._~-`), or 16+ of anything.
_BEARER = re.compile(r"(?i)\b(bearer|basic|token|digest|apikey|api-key|negotiate|ntlm)(\s+)"
                     r"(?=([A-Za-z0-9._~+/-]{8,}=*))\3")
_CREDENTIAL_LIKE = re.compile(r"[0-9+/=._~-]|[a-z].*[A-Z]|[A-Z].*[a-z]")
_LOGIN = re.compile(r"(?i)\b((?:wandb|huggingface-cli|hf|docker|npm|vault)\s+login\b(?:\s+-[\w-]+)*\s+)(?![-<])(\S+)")
_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]*)-----.*?(?:-----END \1-----|\Z)", re.S)
_PEM_BEGIN = re.compile(r"-----BEGIN (?=([A-Z0-9 ]*)-----)(?=[A-Z0-9 ]*PRIVATE KEY|[A-Z0-9 ]*CERTIFICATE REQUEST-----)\1-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*-----")


def _looks_random(word: str) -> bool:
    if _UUID.match(word) or word.startswith("/") or re.fullmatch(r"[0-9a-fA-F]+", word):
        return False
    classes = sum(bool(re.search(p, word)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]"))
    return classes == 3


def looks_secret(value: str) -> bool:
    """True for values shaped like credentials: known token formats or long random strings."""
    if _SECRET_VALUE.search(value) or _URL_CREDENTIALS.search(value) or redact_text(value) != value:
        return True
    return any(_looks_random(m.group(0)) for m in _LONG_RANDOM.finditer(value))


def _pem(match: re.Match) -> str:
    return f"-----BEGIN {match.group(1)}----- {REDACTED}" + (f" -----END {match.group(1)}-----"
                                                              if "-----END" in match.group(0) else "")


def redact_text(text: str) -> str:
    """Replace every credential-shaped piece of a text: the one redaction every path uses
    (log lines, command-line words, env values, report fields in every output format)."""
    if "-----BEGIN" in text:
        text = _PEM.sub(_pem, text)
    text = _QUOTED_PAIR.sub(lambda m: m.group(1) + m.group(3) + REDACTED + m.group(3), text)
    text = _PAIR.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _ANY_PAIR.sub(_any_pair, text)
    text = _FLAG_PAIR.sub(lambda m: m.group(1) + m.group(2) + REDACTED if secret_flag(m.group(1)) else m.group(0),
                          text)
    text = _LOGIN.sub(lambda m: m.group(1) + REDACTED, text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _NETRC.sub(lambda m: m.group(1) + REDACTED, text)
    text = _NETRC_LINE.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
    text = _BEARER.sub(_bearer, text)
    text = _SECRET_VALUE.sub(REDACTED, text)
    text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _URL_USER.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _QUERY_PARAM.sub(_query, text)
    text = client_passwords(text)
    text = _KEYISH_VALUE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _HEX_RUN.sub(REDACTED, text)
    text = _LONG_RANDOM.sub(lambda m: REDACTED if _looks_random(m.group(0)) else m.group(0), text)
    return second_net(text)


def _any_pair(match: re.Match) -> str:
    name = match.group(1)
    if name.upper() == name and any(c.isalpha() for c in name):
        hidden = secret_name(name)
    else:
        hidden = any(part.lower() in _TEXT_PARTS for part in _NAME_PART.findall(name))
    return match.group(1) + match.group(2) + REDACTED if hidden else match.group(0)


def _query(match: re.Match) -> str:
    if match.group(3) == REDACTED or not _QUERY_SECRET.search(match.group(2)):
        return match.group(0)
    return f"{match.group(1)}{match.group(2)}={REDACTED}"


def secret_flag(flag: str) -> bool:
    """True for an option whose name says its value is a secret: a long word anywhere in it
    (`--key-passphrase`, `--clientSecret`), a short one as a whole part (`--db-pass`, `-pwd`)."""
    name = flag.lstrip("-")
    if _FLAG_WORDS.search(re.sub(r"[-.]", "", name).lower()):
        return True
    return any(part.lower() in _FLAG_PARTS for part in _NAME_PART.findall(name))


def _bearer(match: re.Match) -> str:
    credential = match.group(3)
    if len(credential) >= 16 or _CREDENTIAL_LIKE.search(credential):
        return match.group(1) + match.group(2) + REDACTED
    return match.group(0)


def redact_comm(name: str) -> str:
    """A thread's kernel name (/proc/PID/task/TID/comm): redacted as any text, and, when it fills
    the kernel's 15 bytes, a provider token prefix that reaches its end (a token cut short) too."""
    name = redact_cached(name)
    if len(name.encode()) >= COMM_BYTES:
        name = _TOKEN_STUB.sub(REDACTED, name)
    return name


# Log tails are read again every watch round and mostly hold the lines of the round before;
# open files' paths repeat in every sample.
redact_cached = functools.lru_cache(maxsize=8192)(redact_text)


class LineRedactor:
    """Redacts output one line at a time; the body of a PEM block (a private key) is dropped whole."""

    def __init__(self) -> None:
        self.in_pem = False

    def __call__(self, line: str) -> str:
        if self.in_pem:
            end = _PEM_END.search(line)
            if end is None:
                return REDACTED
            self.in_pem = False
            return line[end.start():]
        begin = _PEM_BEGIN.search(line)
        if begin and not _PEM_END.search(line, begin.end()):
            self.in_pem = True
            return redact_text(line[:begin.start()]) + begin.group(0) + f" {REDACTED}"
        return redact_cached(line)


def redact_lines(lines) -> tuple[str, ...]:
    """Redact a sequence of output lines (see LineRedactor)."""
    redact = LineRedactor()
    return tuple(redact(line) for line in lines)


def secret_name(name: str) -> bool:
    """True for a name (environment variable, local variable) that says it holds a secret."""
    if _SECRET_NAME.search(name) or _SECRET_WORDS.search(name):
        return True
    return any(part.lower() in _SECRET_PARTS for part in _NAME_PART.findall(name))


def filter_env(env: dict[str, str]) -> dict[str, str]:
    """The allowlisted part of an environment, with credential-looking values replaced."""
    kept = {}
    for name, value in env.items():
        if name not in _ALLOWED_NAMES and not name.startswith(_ALLOWED_PREFIXES):
            continue
        if secret_name(name) or looks_secret(value):
            kept[name] = REDACTED
        else:
            kept[name] = value
    return dict(sorted(kept.items()))


def redact_cmdline(argv: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """A command line with the values of secret-named flags and secret-shaped words replaced."""
    out: list[str] = []
    hide_next = False
    for i, word in enumerate(argv):
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if i and _KEYISH_FLAG.match(argv[i - 1]) and re.fullmatch(_KEY_RUN, word):
            out.append(REDACTED)
            continue
        flag = _FLAG.match(word)
        if flag and secret_flag(flag.group(1)):
            if flag.group(2):
                out.append(flag.group(1) + "=" + REDACTED)
            else:
                out.append(word)
                hide_next = True
            continue
        out.append(redact_text(word))
    out = _pem_words(client_words(out))
    # What spans words (`-H "Cookie:" V`, a netrc echoed as words): the text redaction over them
    # joined a line each, mapped back word for word.
    if len(out) > 1 and not any("\n" in word or "\r" in word for word in out):
        again = redact_text("\n".join(out)).split("\n")
        if len(again) == len(out):
            out = again
    return tuple(out)


def _pem_words(words: list[str]) -> list[str]:
    """A key block given as words (`echo -----BEGIN PRIVATE KEY----- MII... -----END ...`): its body hidden."""
    out, inside, header = list(words), False, False
    for i, word in enumerate(words):
        if word.startswith("-----BEGIN"):
            inside, header = True, not word.endswith("-----") or word == "-----BEGIN"
        elif inside and header:
            header = not word.endswith("-----")
        elif inside and word.startswith("-----END"):
            inside = False
        elif inside:
            out[i] = REDACTED
    return out


# --- the short options that carry a password in the common command-line clients -----------------
# `mysql -pPW` and `mysql -p PW`, `redis-cli -a PW`, `sshpass -p PW`, `ldapsearch -w PW`, `zip -P PW`,
# `curl -u user:PW`, `docker login -p PW`: the option's name says nothing, only the program does.
# program -> (the option letters that take a password, the subcommand they belong to, if any)
_CLIENTS: dict[str, tuple[str, str | None]] = {
    **{name: ("p", None) for name in (
        "mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump", "mysqlsh",
        "mariadb", "mariadb-dump", "mariadb-admin", "sshpass", "mongo", "mongosh", "mongodump", "mongorestore",
        "mongoexport", "mongoimport", "rabbitmqadmin", "7z", "7za", "7zr")},
    **{name: ("a", None) for name in ("redis-cli", "keydb-cli", "valkey-cli")},
    **{name: ("w", None) for name in ("ldapsearch", "ldapmodify", "ldapadd", "ldapdelete", "ldapwhoami",
                                      "ldappasswd", "ldapcompare", "ldapmodrdn")},
    **{name: ("P", None) for name in ("sqlcmd", "bcp", "zip", "unzip", "zipcloak")},
    **{name: ("p", "login") for name in ("docker", "podman", "nerdctl", "buildah", "skopeo", "helm", "oras")},
    "curl": ("uU", None), "smbclient": ("U", None), "openssl": ("k", None), "az": ("p", "login"),
}
_NAMES = re.compile(r"(?<![\w.-])(?:" + "|".join(re.escape(n) for n in sorted([*_CLIENTS, "htpasswd"], key=len,
                                                                               reverse=True))
                    + r")(?![\w.-])")
_END = frozenset({"|", "||", "&&", ";", "&"})
_QUOTES = "\"'`("


def client_words(words: list[str] | tuple[str, ...]) -> list[str]:
    """A command's words with the password a client's short option takes replaced: attached
    (`-pPW`) or the next word (`-p PW`), until the command ends (`|`, `;`, `&&`)."""
    out = list(words)
    letters, waiting, hide_next = "", None, False
    for i, word in enumerate(words):
        if hide_next:
            out[i], hide_next = REDACTED, False
            continue
        name = word.lstrip(_QUOTES).rsplit("/", 1)[-1]
        if name == "htpasswd":
            _htpasswd(words, i + 1, out)
            continue
        if name in _CLIENTS:
            letters, waiting = _CLIENTS[name]
            continue
        if not letters:
            continue
        if word in _END or word.endswith(";"):
            letters, waiting = "", None
        elif waiting is not None:
            waiting = None if word == waiting else waiting
        elif len(word) >= 2 and word[0] == "-" and word[1] in letters:
            if len(word) == 2:
                hide_next = True
            elif word[2:] != REDACTED:
                out[i] = word[:2] + REDACTED
    return out


def _htpasswd(words, start: int, out: list[str]) -> None:
    """`htpasswd -b [-c] FILE USER PW` (`-nb USER PW`): with `-b` the password is the third operand (the second)."""
    flags, operands = "", []
    for i in range(start, len(words)):
        word = words[i]
        if word in _END or word.endswith(";"):
            break
        if word.startswith("-") and not operands:
            flags += word[1:]
        else:
            operands.append(i)
    at = 1 if "n" in flags else 2
    if "b" in flags and len(operands) > at:
        out[operands[at]] = REDACTED


def client_passwords(text: str) -> str:
    """`client_words` over free text: each word of a line that names a client, put back in its place."""
    if _NAMES.search(text) is None:
        return text
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    words = [text[a:b] for a, b in spans]
    hidden = client_words(words)
    if hidden == words:
        return text
    pieces, at = [], 0
    for (a, b), before, after in zip(spans, words, hidden):
        pieces.append(text[at:a] + after)
        at = b
    return "".join(pieces) + text[at:]
