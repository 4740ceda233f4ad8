"""Generators for the safety tests' samples: key-shaped strings from a seeded RNG (so no
literal token sits in the repository for a secret scanner to trip on), Luhn-valid card
numbers, JWTs and PEM blocks."""

from __future__ import annotations

import base64
import json
import random
import string

RNG = random.Random(20240601)
ALNUM = string.ascii_letters + string.digits
B32 = string.ascii_uppercase + "234567"
B64 = string.ascii_letters + string.digits + "+/"
URLSAFE = ALNUM + "_-"
BLOCKLIST_POLICY = """
[blocklist]
words = ["project falcon", "acme-internal"]
patterns = ['\\bTICKET-[0-9]{3,6}\\b']
"""


def tok(n: int, alphabet: str = ALNUM) -> str:
    while True:
        s = "".join(RNG.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in s) and any(c.isalpha() for c in s):
            return s


def letters(n: int) -> str:
    return "".join(RNG.choice(string.ascii_letters) for _ in range(n))


def wrap(values: list[str], templates: list[str]) -> list[tuple[str, str]]:
    return [(templates[i % len(templates)].format(v=v), v) for i, v in enumerate(values)]


KEY_TEMPLATES = [
    "{v}",
    "export API_KEY={v}",
    'client = Client(api_key="{v}")',
    "my key is {v} can you check why it fails?",
    "KEY='{v}'",
    '{{"token": "{v}"}}',
    "key: {v}\nurl: https://api.host.io",
    "(see {v})",
    "Use `{v}` in the header.",
    "The token {v}. Then restart.",
]


def luhn_complete(prefix: str, length: int) -> str:
    body = prefix + "".join(RNG.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for check in string.digits:
        candidate = body + check
        total = 0
        for i, ch in enumerate(reversed(candidate)):
            d = int(ch)
            if i % 2:
                d = d * 2 - 9 if d > 4 else d * 2
            total += d
        if total % 10 == 0:
            return candidate
    raise AssertionError("unreachable")


def group(digits: str, sizes: list[int], sep: str) -> str:
    out, i = [], 0
    for size in sizes:
        out.append(digits[i : i + size])
        i += size
    return sep.join(out)


def b64url(obj) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


def jwt(header=None) -> str:
    header = header or {"alg": RNG.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
    payload = {"sub": str(RNG.randint(1, 10**9)), "name": letters(8), "iat": 1700000000}
    return f"{b64url(header)}.{b64url(payload)}.{tok(43, URLSAFE)}"


def pem(kind: str = "RSA ", lines: int = 6, end: bool = True) -> str:
    body = "\n".join(tok(64, B64) for _ in range(lines))
    block = f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n"
    return block + (f"-----END {kind}PRIVATE KEY-----" if end else "")
