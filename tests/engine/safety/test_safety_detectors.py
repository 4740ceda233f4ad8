"""Detector quality on the labelled corpus, regex safety, and the checks behind the shapes."""

from __future__ import annotations

import math
import time

import pytest
from safety_corpus import BLOCKLIST_POLICY, NEGATIVES, POSITIVES

from wren.engine.safety import Policy, redact, scan
from wren.engine.safety.detector import regex_shape
from wren.engine.safety.matcher import Matcher
from wren.engine.safety.personal import iban_ok, luhn_ok
from wren.engine.safety.policy import BUILTIN_DETECTORS

FLOOR = 0.95


@pytest.fixture(scope="module")
def corpus_policy() -> Policy:
    return Policy.from_toml(BLOCKLIST_POLICY)


def _spans(policy: Policy, text: str, category: str) -> list[tuple[int, int]]:
    found = Matcher(policy.detectors).feed(text, final=True)
    return [(c.start, c.end) for c in found if c.detector.category == category]


def _score(policy: Policy, category: str) -> tuple[int, int, int, int, int, list[str]]:
    tp = fn = fp = 0
    misses = []
    for text, value in POSITIVES[category]:
        at = text.index(value)
        hits = _spans(policy, text, category)
        if any(a < at + len(value) and b > at for a, b in hits):
            tp += 1
        else:
            fn += 1
            misses.append(f"missed: {text[:80]!r}")
    for text in NEGATIVES[category]:
        if _spans(policy, text, category):
            fp += 1
            misses.append(f"false positive: {text[:80]!r}")
    return len(POSITIVES[category]), len(NEGATIVES[category]), tp, fn, fp, misses


def test_every_category_has_a_corpus(corpus_policy):
    categories = {d.category for d in corpus_policy.detectors}
    assert categories == set(POSITIVES) == set(NEGATIVES)
    for category in categories:
        assert len(POSITIVES[category]) >= 20, category
        assert len(NEGATIVES[category]) >= 20, category


def test_precision_and_recall_per_detector(corpus_policy):
    rows, failures = [], []
    for category in sorted(POSITIVES):
        pos, neg, tp, fn, fp, misses = _score(corpus_policy, category)
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn)
        rows.append(f"{category:26s} {pos:4d} {neg:4d} {precision:9.3f} {recall:7.3f}")
        if precision < FLOOR or recall < FLOOR:
            failures.append(f"{category}: precision {precision:.3f} recall {recall:.3f}: {misses}")
    print("\n" + f"{'category':26s} {'pos':>4s} {'neg':>4s} {'precision':>9s} {'recall':>7s}")
    print("\n".join(rows))
    assert not failures, failures


def test_builtin_patterns_are_bounded():
    for d in BUILTIN_DETECTORS:
        shape = regex_shape(d.pattern.pattern, d.pattern.flags)
        assert math.isfinite(shape.reach), d.rule
        assert not shape.nested_unbounded and not shape.anchored, d.rule
        assert shape.min_width > 0, d.rule
        assert d.reach <= 320, (d.rule, d.reach)


def test_shipped_word_lists_are_bounded_and_small():
    for d in Policy.shipped().detectors:
        if d.category.startswith("content."):
            assert math.isfinite(regex_shape(d.pattern.pattern).reach)
            assert d.reach < 100


def _rep(unit: str, n: int = 1_000_000) -> str:
    return (unit * (n // len(unit) + 1))[:n]


ADVERSARIAL = {
    "letters": "a" * 1_000_000,
    "digits": "7" * 1_000_000,
    "digit-space": _rep("4 "),
    "digit-dash": _rep("1-"),
    "key-prefix-run": "sk-" + "a" * 1_000_000,
    "key-prefixes": _rep("sk-proj-"),
    "at-signs": _rep("a@"),
    "email-dots": _rep("a@b."),
    "long-local-part": "a" * 500 + "@" + _rep("b."),
    "plus-digits": _rep("+1 "),
    "parens": _rep("(0"),
    "pem-headers": _rep("-----BEGIN RSA PRIVATE KEY-----\n"),
    "pem-body": "-----BEGIN PRIVATE KEY-----\n" + "A" * 1_000_000,
    "jwt-heads": _rep("eyJaaaaaaaaa.eyJ"),
    "jwt-long": "eyJhbGciOiJIUzI1NiJ9.eyJ" + "a" * 1_000_000,
    "password-keys": _rep("password="),
    "password-quotes": _rep('password="'),
    "url-userinfo": _rep("a://b:"),
    "url-long-password": "x://" + "u" * 60 + ":" + "p" * 1_000_000,
    "iban-heads": _rep("DE89 "),
    "nino-heads": _rep("AB 12 "),
    "ssn-heads": _rep("123-45-"),
    "newlines": "\n" * 1_000_000,
    "fences": _rep("```\n"),
    "backticks": "`" * 1_000_000,
    "slack-hooks": _rep("https://hooks.slack.com/services/T12345678/"),
    "word-starts": _rep("kill "),
    "card-groups": _rep("4111 1111 1111 111"),
    "unicode": "é" * 1_000_000,
}


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_megabyte_scans_in_bounded_time(name):
    policy = Policy.from_toml('[actions]\nsecret = "redact"\npii = "redact"\n' + BLOCKLIST_POLICY)
    text = ADVERSARIAL[name]
    start = time.perf_counter()
    scan(text, policy, "remote")
    redact(text)
    elapsed = time.perf_counter() - start
    # Linear scans take well under a second here; catastrophic backtracking takes minutes.
    assert elapsed < 5.0, f"{name}: {elapsed:.2f}s"


def test_luhn_and_iban_checksums():
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert luhn_ok("378282246310005") and luhn_ok("6011111111111117")
    assert iban_ok("DE89 3704 0044 0532 0130 00") and iban_ok("GB82WEST12345698765432")
    assert not iban_ok("DE89370400440532013001")  # checksum
    assert not iban_ok("DE8937040044053201300")  # length for DE
    assert not iban_ok("XX89370400440532013000")  # no such country


def test_region_detectors_cover_the_whole_block():
    body = "\n".join("MIIEow" + "A1b2C3d4" * 7 for _ in range(3))
    text = f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\nbye"
    result = scan(text, Policy.from_toml('[actions]\nsecret = "redact"'))
    assert result.redacted_text == "key:\n[REDACTED:secret.private_key]\nbye"


def test_jwt_at_sentence_end_keeps_the_full_stop():
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV"
    result = scan(f"use {token}.", Policy.from_toml('[actions]\nsecret = "redact"'))
    assert result.redacted_text == "use [REDACTED:secret.jwt]."


def test_password_span_is_the_value_only():
    result = scan('db_password = "Sup3r-s3cret"', Policy.from_toml('[actions]\nsecret = "redact"'))
    assert result.redacted_text == 'db_password = "[REDACTED:secret.password]"'


def test_email_inside_a_connection_string_is_reported_once():
    text = "postgres://app:Xk2mq9@db.internal.io/app"
    categories = [f.category for f in scan(text).findings]
    assert categories == ["secret.connection_string"]
