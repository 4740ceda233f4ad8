"""Detectors for secrets: API keys, tokens, private keys, passwords, credentialed URLs.

Every pattern is bounded (no `+`/`*` without a cap) and starts at a token boundary, so a
1 MB run of key-like characters costs one failed attempt per run, not one per character.
Possessive quantifiers (`{m,n}+`) stop the engine from retrying shorter runs when the
character after a token rules it out.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from .detector import Detector, bounded_after, has_letter_and_digit, token_pattern

_PLACEHOLDER_WORDS = frozenset(
    ["password", "passwd", "pwd", "pass", "passphrase", "secret", "none", "null", "nil", "true", "false", "undefined", "required", "optional", "str", "string", "text", "hidden", "redacted", "masked", "example", "sample", "your_password", "yourpassword", "mypassword", "placeholder", "value", "empty", "dummy", "todo", "tbd", "xxx"]
)
# Values that point somewhere else instead of being the secret: env vars, templates, code.
_INDIRECT = re.compile(r"^[$%{<@&*]|\{\{|\$\{|os\.environ|getenv|process\.env|env\(|secrets\.")
_DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,64}(?:\.[A-Za-z_][A-Za-z0-9_]{0,64}){1,8}")
_SNAKE_NAME = re.compile(r"[a-z][a-z0-9]{0,30}(?:_[a-z0-9]{1,30}){1,8}")


def is_placeholder(value: str) -> bool:
    """A documentation stand-in or a reference to a secret kept elsewhere."""
    low = value.lower().strip("\"'")
    if len(set(low)) <= 1 or low in _PLACEHOLDER_WORDS:
        return True
    if set(low) <= set("*x•._-#?") or _INDIRECT.search(low):
        return True
    return "password" in low and not any(ch.isdigit() for ch in low)


def _random_part(prefix_len: int):
    def check(m: re.Match[str]) -> bool:
        return has_letter_and_digit(m.group()[prefix_len:])

    return check


def _not_uniform(m: re.Match[str]) -> bool:
    return len(set(m.group())) > 8


def _openai_ok(m: re.Match[str]) -> bool:
    body = m.group()[3:]
    for kind in ("proj-", "svcacct-", "admin-", "None-"):
        body = body.removeprefix(kind)
    return has_letter_and_digit(body)


OPENAI = Detector(
    "secret.openai_key",
    "openai-api-key",
    token_pattern("sk-", r"(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,200}+|[A-Za-z0-9]{32,64}+"),
    check=_openai_ok,
    reveal=8,
)

ANTHROPIC = Detector(
    "secret.anthropic_key",
    "anthropic-api-key",
    token_pattern("sk-ant-", r"[a-z]{2,8}[0-9]{0,3}-[A-Za-z0-9_-]{32,200}+"),
    check=lambda m: has_letter_and_digit(m.group().split("-", 3)[3]),
    reveal=13,
)

AWS_ACCESS_KEY = Detector(
    "secret.aws_access_key",
    "aws-access-key-id",
    re.compile(bounded_after("A(?:KIA|SIA|BIA|CCA)", "[A-Z2-7]{16}", "A-Za-z0-9")),
    reveal=4,
)

AWS_SECRET_KEY = Detector(
    "secret.aws_secret_key",
    "aws-secret-access-key",
    re.compile(
        r"[AaSs](?<![A-Za-z0-9][AaSs])"
        r"(?i:(?<=a)ws[_.-]?secret[_.-]?(?:access[_.-]?)?key|(?<=s)ecret[_.-]?access[_.-]?key)"
        r"[\"']?[ \t]{0,3}(?::=|=>|=|:)[ \t]{0,3}[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
    ),
    check=lambda m: has_letter_and_digit(m.group("secret")),
    groups=("secret",),
    needles=("ecret", "ECRET"),  # secret, Secret, SECRET
)

GITHUB = Detector(
    "secret.github_token",
    "github-token",
    token_pattern("g", r"h[pousr]_[A-Za-z0-9]{36,80}+|ithub_pat_[A-Za-z0-9_]{40,120}+"),
    check=lambda m: has_letter_and_digit(m.group()[4:]),
    reveal=4,
)

GITLAB = Detector(
    "secret.gitlab_token",
    "gitlab-personal-access-token",
    token_pattern("glpat-", r"[A-Za-z0-9_-]{20,64}+"),
    check=_not_uniform,
    reveal=6,
)

SLACK_TOKEN = Detector(
    "secret.slack_token",
    "slack-token",
    token_pattern("xox[baprs]-", r"[0-9A-Za-z]{1,20}+(?:-[0-9A-Za-z]{1,48}+){1,4}+"),
    check=lambda m: len(m.group()) >= 24 and has_letter_and_digit(m.group()[5:]),
    reveal=5,
)

SLACK_WEBHOOK = Detector(
    "secret.slack_webhook",
    "slack-webhook-url",
    re.compile(
        r"https?://hooks\.slack\.com/(?:services|workflows|triggers)/T[A-Z0-9]{6,12}/"
        r"[A-Za-z0-9_/]{20,120}+(?![A-Za-z0-9_/-])"
    ),
    check=lambda m: bool(re.search(r"[A-Za-z0-9]{16}", m.group().rsplit("/", 1)[-1])),
    reveal=23,
)

STRIPE = Detector(
    "secret.stripe_key",
    "stripe-live-key",
    token_pattern("[srp]k_live_", r"[A-Za-z0-9]{20,120}+"),
    check=_random_part(8),
    needles=("_live_",),
    reveal=8,
)

GOOGLE = Detector(
    "secret.google_api_key",
    "google-api-key",
    token_pattern("AIza", r"[0-9A-Za-z_-]{35}"),
    check=_random_part(4),
    reveal=4,
)


def _pem_region(text: str) -> int | None:
    # "-----BEGIN PRIVATE KEY-----\n...\n-----END" in docs is a placeholder, not a key.
    if not re.search(r"[A-Za-z0-9+/]{40}", text):
        return None
    return len(text.rstrip())


PRIVATE_KEY = Detector(
    "secret.private_key",
    "pem-private-key",
    re.compile(r"-----BEGIN (?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?-----"),
    # The block ends at its END line, before any other armour line (a BEGIN without an
    # END), or at the first character no PEM body contains.
    region_end=re.compile(
        r"-----END (?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?-----|(?=-----)"
        r"|(?=[^A-Za-z0-9+/=\s:,-])"
    ),
    region_cap=12_000,
    finish_region=_pem_region,
    reveal=10,
)


def _jwt_region(text: str) -> int | None:
    token = text.rstrip(".")
    parts = token.split(".")
    if not 2 <= len(parts) <= 5 or min(len(p) for p in parts[:2]) < 8:
        return None
    head = parts[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(header, dict) or not ({"alg", "typ", "enc"} & header.keys()):
        return None
    return len(token)


JWT = Detector(
    "secret.jwt",
    "json-web-token",
    re.compile(bounded_after("eyJ", r"[A-Za-z0-9_-]{5,300}+\.eyJ", "A-Za-z0-9_.-", tail=False)),
    region_end=re.compile(r"(?=[^A-Za-z0-9_.-])"),
    region_cap=8_000,
    finish_region=_jwt_region,
    reveal=3,
)


def _password_ok(m: re.Match[str]) -> bool:
    value = m.group("dq") or m.group("sq") or m.group("bare")
    if is_placeholder(value):
        return False
    if m.group("bare") is None:
        return True
    # A bare word after "Password:" is usually prose ("Password: must be 8 characters").
    if m.group("sep") == ":" and value.isalpha() and value.islower():
        return False
    if _DOTTED_NAME.fullmatch(value) or _SNAKE_NAME.fullmatch(value):
        return False  # code: password = self.password, password = db_pass
    return not any(word in value.lower() for word in ("pass", "pwd", "secret"))


PASSWORD = Detector(
    "secret.password",
    "password-assignment",
    re.compile(
        # password, PASSWD, pwd; also smtpPassword and PGPASSWORD-style names
        r"[Pp](?:(?<![A-Za-z0-9][Pp])(?i:ass(?:word|wd|phrase)|wd)"
        r"|(?<=[a-z0-9]P)(?:ass(?:word|wd|phrase)|wd)|(?<=[A-Z]P)ASS(?:WORD|WD))"
        r"(?![A-Za-z0-9_])[\"']?[ \t]{0,3}(?P<sep>:=|=>|=|:)(?![=>])[ \t]{0,3}"
        r"(?:\"(?P<dq>[^\"\\\r\n]{3,128}+)\"|'(?P<sq>[^'\\\r\n]{3,128}+)'"
        r"|(?P<bare>[^\s\"'`<>(){}\[\],;]{3,128}+)(?![(\[{]))"
    ),
    check=_password_ok,
    groups=("dq", "sq", "bare"),
)

CONNECTION_STRING = Detector(
    "secret.connection_string",
    "url-with-password",
    re.compile(
        r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{1,20}+://"
        r"[^\s:/@?#\"'<>]{0,64}+:(?P<secret>[^\s/@?#\"'<>]{1,128}+)@(?=[A-Za-z0-9\[])"
    ),
    check=lambda m: not is_placeholder(m.group("secret")),
    groups=("secret",),
    needles=("://",),
)

DETECTORS: tuple[Detector, ...] = (
    OPENAI,
    ANTHROPIC,
    AWS_ACCESS_KEY,
    AWS_SECRET_KEY,
    GITHUB,
    GITLAB,
    SLACK_TOKEN,
    SLACK_WEBHOOK,
    STRIPE,
    GOOGLE,
    PRIVATE_KEY,
    JWT,
    PASSWORD,
    CONNECTION_STRING,
)
