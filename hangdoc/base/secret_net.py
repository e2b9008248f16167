"""The second net behind redaction's classes: a secret detector's patterns, written here.

Modelled on the plugins of Yelp's detect-secrets (Apache-2.0): its keyword detector (a word that
says "secret" in a value position), its provider formats, private keys, basic-auth URLs, JWTs and
high-entropy strings. `redact.redact_text` runs it last, over what the classes left, so every text
that leaves hangdoc passes both. Each pattern, as those of `redact`, reads a run from its start
once (`(?=(X))\\1` takes X without backtracking into it), so a line costs time linear in its length.
"""
from __future__ import annotations

import math
import re
from collections import Counter

REDACTED = "<redacted>"

# Provider formats with a fixed prefix, shorter forms included: Google OAuth (`ya29.`) and API keys
# (`AIza`), Stripe webhook secrets, age keys, GitLab's newer prefixes, Slack webhooks, SendGrid,
# Twilio, Databricks, Vault, Shopify, Square, Doppler, Artifactory, Mailchimp, Telegram bots.
_PROVIDER = re.compile(
    r"(?<![A-Za-z0-9_])(?:ya29\.[\w-]{8,}|AIza[\w-]{10,}|whsec_[A-Za-z0-9+/=]{8,}|AGE-SECRET-KEY-1[A-Z0-9]{8,}|"
    r"gl(?:soat|ft|imt|agent|cbt|rt)-[\w-]{8,}|GR1348941[\w-]{8,}|SG\.[\w-]{16,}\.[\w-]{16,}|"
    r"(?:AC|SK)[0-9a-f]{32}|dapi[0-9a-f]{32}|hv[sbr]\.[\w-]{20,}|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}|"
    r"sq0(?:atp|csp)-[\w-]{16,}|dp\.(?:pt|st|sa|ct)\.[A-Za-z0-9]{20,}|AKC[a-zA-Z0-9]{10,}|AP[0-9ABCDEF][a-zA-Z0-9]{8,}|"
    r"[0-9a-f]{32}-us[0-9]{1,2}|[0-9]{8,10}:AA[\w-]{33}|xox[a-z]-[A-Za-z0-9-]{6,}|"
    r"eyJ[\w-]{4,}\.[\w-]{4,}\.[\w-]*)(?![A-Za-z0-9_])")
_SLACK_HOOK = re.compile(r"hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9+/_-]{8,}")
# Connection strings (Azure storage and service bus, any length), kubeconfig's key data, npm's
# `_authToken` and `_auth`.
_CONN_KEY = re.compile(r"(?i)((?<![\w-])(?:AccountKey|SharedAccessKey|SharedAccessSignature|client-key-data|"
                       r"_authToken|_auth|_password)\s*[=:]\s*[\"']?)(?=([^\s;\"',]+))\2")

# The keyword detector: a word that says what a value is, then the value, with no space needed
# (`password:PW`, `token=T`), through a quote (`"auth": "X"`, as Docker's config.json holds), or
# for the words that never read as prose (`access_token V`, `Bearer: V`) after a space.
_LONG_WORD = (r"passw(?:or)?d|passwd|passphrase|passcode|secret|token|bearer|jwt|hmac|cookie|sessionid|signature|"
              r"credentials?|apikey|(?:access|secret|private|client|account|signing|auth|master|encryption)_?key")
_SHORT_WORD = r"pwd|pw|pass|sid|sig|auth|session_?id|api_?key"
# The long words end a key whatever comes before them (`dbpassword`, `NCCL_SIGNINGKEY`), the short
# ones as a whole last part (`db_pass`, `x-sig`): `max_tokens`, `bypass` and `signal` stay.
_WORD_END = re.compile(r"(?i)(?:" + _LONG_WORD + r")$|(?:^|[_.-])(?:" + _SHORT_WORD + r")$")
_KEY_VALUE = re.compile(r"(?<![\w.-])(?=([A-Za-z_][\w.-]{0,63}))\1([\"']?)(\s*[:=]\s*)([\"']?)(?![<\s:])"
                        r"(?=([^\s\"',;&/]+))\5")
_SPACED = re.compile(r"(?i)(?<![\w.-])((?:access|refresh|id|auth|api|bearer|session)[_-]?(?:token|key|id)|"
                     r"client[_-]?secret|bearer|api[_-]?key|x-api-key)(:?\s+)(?![<-])(?=([^\s\"',;&]+))\3")
_QUOTED = re.compile(r"(?i)([\"'](?=([\w.-]{0,64}))\2[\"']\s*:\s*)([\"'])(?=([^\"'\\]*))\4\3")
# Basic auth in a URL: everything before the authority's last `@`, a user part with an `@` of its
# own (`https://me@corp:PW@host`) or URL-encoded (`me%40corp:p%40ss@host`) included.
_AUTHORITY = re.compile(r"(?<![\w+.-])(?=([A-Za-z][\w+.-]{0,31}://))\1(?=([^\s/?#\"']{1,512}))\2")
# The options whose value is `user:password` (curl's `--user`, `-u`, `--proxy-user`, `-U`).
_USER_FLAG = re.compile(r"(?<!\S)(--user|--proxy-user|-u|-U)(\s+|=)([\"']?)(?=([^\s:\"']*))\4:(?=([^\s\"']+))\5")
_HIGH_ENTROPY = re.compile(r"(?=([A-Za-z0-9+/=_.-]{20,}))\1")
_B64_ENTROPY, _HEX_ENTROPY = 4.5, 3.0


def secret_word(name: str) -> bool:
    """True for a key whose last word says it holds a secret (`password`, `db.pwd`, `x-session-id`,
    `aws_secret_access_key`), not for one that merely contains such letters (`keyboard`, `passage`)."""
    return bool(_WORD_END.search(name))


def entropy(text: str) -> float:
    """Shannon entropy in bits a character, as detect-secrets measures it."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def high_entropy(value: str) -> bool:
    """A value random enough to be a key: hex above 3.0 bits a character, base64 above 4.5."""
    if len(value) < 20 or value.startswith("/") or "://" in value:
        return False
    if re.fullmatch(r"[0-9a-fA-F]+", value):
        return entropy(value) > _HEX_ENTROPY and len(value) >= 32
    return entropy(value) > _B64_ENTROPY


def _key_value(match: re.Match) -> str:
    key, value = match.group(1), match.group(5)
    if value == REDACTED[1:] or not (secret_word(key) or high_entropy(value)):
        return match.group(0)[:-len(value)] + _inner_pair(value)
    return match.group(1) + match.group(2) + match.group(3) + match.group(4) + REDACTED


def _inner_pair(value: str) -> str:
    """A value that holds a pair of its own (`stack: password:PW`): from a part whose key says
    secret, the rest of it hidden. One split, no second pass: linear in the value."""
    if ":" not in value and "=" not in value:
        return value
    pieces = re.split(r"([:=])", value)
    for i in range(0, len(pieces) - 2, 2):
        if pieces[i] and pieces[i + 2] and secret_word(pieces[i][-64:]):
            return "".join(pieces[:i + 2]) + REDACTED
    return value


def _spaced(match: re.Match) -> str:
    value = match.group(3)
    if value.startswith(REDACTED) or not re.search(r"[0-9+/=_.~-]|[a-z].*[A-Z]|[A-Z].*[a-z]|^.{16,}$", value):
        return match.group(0)
    return match.group(1) + match.group(2) + REDACTED


def _quoted(match: re.Match) -> str:
    value = match.group(4)
    if value in ("", REDACTED) or not (secret_word(match.group(2)) or high_entropy(value)):
        return match.group(0)
    return match.group(1) + match.group(3) + REDACTED + match.group(3)


def _authority(match: re.Match) -> str:
    authority = match.group(2)
    if "@" not in authority or authority.rsplit("@", 1)[0] == REDACTED:
        return match.group(0)
    return match.group(1) + REDACTED + "@" + authority.rsplit("@", 1)[1]


def second_net(text: str) -> str:
    """Every detector over `text`, each secret replaced by `<redacted>`."""
    text = _PROVIDER.sub(REDACTED, text)
    text = _SLACK_HOOK.sub("hooks.slack.com/" + REDACTED, text)
    text = _CONN_KEY.sub(lambda m: m.group(1) + REDACTED, text)
    text = _USER_FLAG.sub(lambda m: m.group(1) + m.group(2) + m.group(3) + m.group(4) + ":" + REDACTED, text)
    text = _AUTHORITY.sub(_authority, text)
    text = _QUOTED.sub(_quoted, text)
    text = _SPACED.sub(_spaced, text)
    text = _KEY_VALUE.sub(_key_value, text)
    return text
