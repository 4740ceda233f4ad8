"""Secrets hidden by simple obfuscation are still found, their spans cut the original
characters, and ordinary text raises no more findings than before (obfuscation.py).

Measured on the scanner before normalization (commit f8c6d07): 6 of the 220 obfuscated
secrets found (only those the obfuscation left unchanged, such as digits under a homoglyph
map), and 0 findings on the 587 ordinary texts.
"""

from __future__ import annotations

import pytest
from obfuscation import OBFUSCATIONS, SECRETS, TEMPLATE, false_positives, run_secrets
from ordinary_corpus import texts

from wren.engine.events import SafetyAction
from wren.engine.safety import Policy, redact, scan

FALSE_POSITIVES_BEFORE = 0
CAUGHT_BEFORE = 6
REDACT_ALL = Policy.from_toml('[actions]\nsecret = "redact"\npii = "redact"\n')


@pytest.fixture(scope="module")
def results():
    return run_secrets(scan, Policy.shipped())


def test_most_obfuscated_secrets_are_found(results):
    caught = sum(results.values())
    missed = sorted(k for k, v in results.items() if not v)
    assert caught >= 215 > CAUGHT_BEFORE, missed


@pytest.mark.parametrize("obfuscation", [name for name, _ in OBFUSCATIONS])
def test_each_obfuscation_is_mostly_undone(results, obfuscation):
    caught = [name for name, _, _ in SECRETS if results[(name, obfuscation)]]
    floor = 5 if obfuscation == "dots between groups" else 9
    assert len(caught) >= floor, caught


def test_no_more_false_positives_on_ordinary_text_than_before():
    found = false_positives(scan, Policy.shipped(), texts())
    assert len(found) <= FALSE_POSITIVES_BEFORE, found


@pytest.mark.parametrize(("name", "category", "secret"), SECRETS, ids=[s[0] for s in SECRETS])
def test_redaction_cuts_the_original_characters(results, name, category, secret):
    head, tail = TEMPLATE.split("{}")
    for oname, obfuscate in OBFUSCATIONS:
        if not results[(name, oname)]:
            continue
        hidden = obfuscate(secret)
        out = scan(TEMPLATE.format(hidden), REDACT_ALL, "remote").redacted_text
        assert out.startswith(head) and out.endswith(tail), (oname, out)
        assert f"[REDACTED:{category}]" in out, (oname, out)
        assert not any(f.category == category for f in scan(out, REDACT_ALL, "remote").findings), (oname, out)
        assert f"[REDACTED:{category}]" in redact(TEMPLATE.format(hidden)), oname


def test_a_card_number_with_no_break_spaces_is_redacted_for_a_remote_model():
    text = "my card is 4111\u00a01111\u00a01111\u00a01111, expiry next May"
    result = scan(text, Policy.shipped(), "remote")
    assert result.action is SafetyAction.REDACT
    assert result.redacted_text == "my card is [REDACTED:pii.payment_card], expiry next May"
    [finding] = result.findings
    assert text[finding.span[0]:finding.span[1]] == "4111\u00a01111\u00a01111\u00a01111"


def test_a_span_in_a_normalized_reading_names_the_original_characters():
    key = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"
    hidden = "\u200b".join(key)
    text = f"token: {hidden} (do not share)"
    [finding] = scan(text, Policy.shipped(), "remote").findings
    assert finding.category == "secret.github_token"
    assert text[finding.span[0]:finding.span[1]] == hidden


def test_a_base64_run_is_reported_whole():
    import base64

    encoded = base64.b64encode(b"card 4111 1111 1111 1111 thanks").decode()
    text = f"blob={encoded};"
    [finding] = scan(text, Policy.shipped(), "remote").findings
    assert finding.category == "pii.payment_card"
    assert text[finding.span[0]:finding.span[1]] == encoded


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_an_encoded_secret_behind_many_decoy_runs_is_found_in_bounded_time():
    import base64
    import random
    import string
    import time

    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits
    decoys = " ".join("".join(rng.choice(alphabet) for _ in range(20)) for _ in range(40_000))
    secret = "sk-proj-" + "Qw3eR5tY7uI9oP1aS3dF5gH7jK9lZ1xC3vB5nM7"
    text = f"{decoys} {base64.b64encode(f'my key {secret}'.encode()).decode()}"
    start = time.perf_counter()
    result = scan(text, REDACT_ALL, "remote")
    elapsed = time.perf_counter() - start
    assert [f.category for f in result.findings] == ["secret.openai_key"]
    assert result.redacted_text.endswith(" [REDACTED:secret.openai_key]")
    assert elapsed < 5.0, elapsed
