"""The obfuscation experiment: 10 kinds of secret x 22 obfuscations, scanned for a remote
destination, and the false positives on ordinary text (ordinary_corpus.py).

Run it to see the table:  python tests/engine/safety/obfuscation.py
test_safety_obfuscation.py asserts on the same numbers.
"""

from __future__ import annotations

import base64
import random
import string
import sys
from collections.abc import Callable
from pathlib import Path

_RNG = random.Random(35)

_CYRILLIC = dict(zip("aeopcxyABEKMHOPCTXsijh", "аеорсхуАВЕКМНОРСТХѕіјһ"))
_GREEK = dict(zip("oviukABEZHIKMNOPTYX", "ονιυκΑΒΕΖΗΙΚΜΝΟΡΤΥΧ"))


def _tok(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    while True:
        s = "".join(_RNG.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in s) and any(c.isalpha() for c in s):
            return s


def _luhn(prefix: str, length: int) -> str:
    body = prefix + "".join(_RNG.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for check in string.digits:
        total = 0
        for i, ch in enumerate(reversed(body + check)):
            d = int(ch)
            if i % 2:
                d = d * 2 - 9 if d > 4 else d * 2
            total += d
        if total % 10 == 0:
            return body + check
    raise AssertionError("unreachable")


def _iban() -> str:
    bban = "WEST" + "".join(_RNG.choice(string.digits) for _ in range(14))
    number = int("".join(str(int(ch, 36)) for ch in bban + "GB00"))
    iban = f"GB{98 - number % 97:02d}{bban}"
    return " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))


def _pem() -> str:
    alphabet = string.ascii_letters + string.digits + "+/"
    body = "\n".join(_tok(64, alphabet) for _ in range(4))
    return f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"


def _card() -> str:
    digits = _luhn("4", 16)
    return " ".join(digits[i : i + 4] for i in range(0, 16, 4))


# (name, the category that must be found, the secret as a user would write it)
SECRETS: list[tuple[str, str, str]] = [
    ("openai key", "secret.openai_key", "sk-proj-" + _tok(48)),
    ("anthropic key", "secret.anthropic_key", "sk-ant-api03-" + _tok(40)),
    ("aws access key", "secret.aws_access_key", "AKIA" + "".join(_RNG.choice("ABCDEFGHJKLMNPQRSTUVWXYZ234567") for _ in range(16))),
    ("github token", "secret.github_token", "ghp_" + _tok(36)),
    ("card number", "pii.payment_card", _card()),
    ("iban", "pii.iban", _iban()),
    ("phone", "pii.phone", "+44 20 7946 0958"),
    ("email", "pii.email", "m.kowalski@protonmail.ch"),
    ("private key", "secret.private_key", _pem()),
    ("password", "secret.password", "password = Tr0ub4dor&3x9"),
]


def _between(sep: str) -> Callable[[str], str]:
    return lambda s: sep.join(s)


def _every(n: int, sep: str) -> Callable[[str], str]:
    return lambda s: sep.join(s[i : i + n] for i in range(0, len(s), n))


def _spaces_or_chars(sep: str) -> Callable[[str], str]:
    """Spaces replaced by `sep`; a secret with no spaces gets `sep` between its characters."""
    return lambda s: s.replace(" ", sep) if " " in s else sep.join(s)


def _groups_or_every(sep: str, n: int) -> Callable[[str], str]:
    return lambda s: s.replace(" ", sep) if " " in s else _every(n, sep)(s)


def _fullwidth(s: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s)


def _monospace(s: str) -> str:
    out = []
    for c in s:
        if "a" <= c <= "z":
            out.append(chr(0x1D68A + ord(c) - ord("a")))
        elif "A" <= c <= "Z":
            out.append(chr(0x1D670 + ord(c) - ord("A")))
        elif "0" <= c <= "9":
            out.append(chr(0x1D7F6 + ord(c) - ord("0")))
        else:
            out.append(c)
    return "".join(out)


def _circled(s: str) -> str:
    out = []
    for c in s:
        if "a" <= c <= "z":
            out.append(chr(0x24D0 + ord(c) - ord("a")))
        elif "A" <= c <= "Z":
            out.append(chr(0x24B6 + ord(c) - ord("A")))
        elif "1" <= c <= "9":
            out.append(chr(0x2460 + ord(c) - ord("1")))
        elif c == "0":
            out.append("\u24ea")
        else:
            out.append(c)
    return "".join(out)


OBFUSCATIONS: list[tuple[str, Callable[[str], str]]] = [
    ("zero-width space between characters", _between("\u200b")),
    ("zero-width joiner every 3 characters", _every(3, "\u200d")),
    ("soft hyphen between characters", _between("\u00ad")),
    ("word joiner between characters", _between("\u2060")),
    ("byte order mark every 5 characters", _every(5, "\ufeff")),
    ("spaced out", _between(" ")),
    ("tab separated", _between("\t")),
    ("Cyrillic homoglyphs", lambda s: "".join(_CYRILLIC.get(c, c) for c in s)),
    ("Greek homoglyphs", lambda s: "".join(_GREEK.get(c, c) for c in s)),
    ("full-width characters", _fullwidth),
    ("mathematical monospace", _monospace),
    ("circled characters", _circled),
    ("combining underline", lambda s: "".join(c + "\u0332" if not c.isspace() else c for c in s)),
    ("no-break spaces", _spaces_or_chars("\u00a0")),
    ("narrow no-break spaces", _spaces_or_chars("\u202f")),
    ("ideographic spaces", _spaces_or_chars("\u3000")),
    ("dots between groups", _groups_or_every(".", 4)),
    ("line breaks between groups", _groups_or_every("\n", 8)),
    ("base64", lambda s: base64.b64encode(s.encode()).decode()),
    ("base64url without padding", lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("=")),
    ("hex", lambda s: s.encode().hex()),
    ("hex bytes with spaces", lambda s: " ".join(f"{b:02x}" for b in s.encode())),
]

TEMPLATE = "Here it is, please keep it safe: {} and thanks for the help."


def caught(scan, policy, category: str, text: str, start: int, end: int) -> bool:
    """A finding of `category` that overlaps the obfuscated secret at [start, end)."""
    result = scan(text, policy, "remote")
    return any(f.category == category and f.span[0] < end and f.span[1] > start for f in result.findings)


def run_secrets(scan, policy) -> dict[tuple[str, str], bool]:
    out = {}
    head = TEMPLATE.index("{}")
    for name, category, secret in SECRETS:
        for oname, obfuscate in OBFUSCATIONS:
            hidden = obfuscate(secret)
            text = TEMPLATE.format(hidden)
            out[(name, oname)] = caught(scan, policy, category, text, head, head + len(hidden))
    return out


def false_positives(scan, policy, texts: list[str]) -> list[tuple[str, str]]:
    return [(f.category, t) for t in texts for f in scan(t, policy, "remote").findings]


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ordinary_corpus import texts

    from wren.engine.safety import Policy, scan

    policy = Policy.shipped()
    results = run_secrets(scan, policy)
    for oname, _ in OBFUSCATIONS:
        row = [n for n, _, _ in SECRETS if results[(n, oname)]]
        print(f"{oname:40} {len(row):2}/10")
    print(f"caught {sum(results.values())} of {len(results)}")
    fps = false_positives(scan, policy, texts())
    print(f"false positives on {len(texts())} ordinary texts: {len(fps)}")
    for category, text in fps:
        print(f"  {category}: {text[:90]!r}")


if __name__ == "__main__":
    main()
