"""OutputGuard: whatever the delta boundaries, a streamed answer shows exactly what a scan
of the whole answer would, never a forbidden string, nothing after a block, and clean text
in full with no delay beyond the hold-back."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from safety_samples import B64, URLSAFE, jwt, luhn_complete, pem, tok

from wren.engine.events import SafetyAction
from wren.engine.safety import OutputGuard, Policy, scan
from wren.engine.safety.matcher import _TRIM_AT
from wren.engine.safety.scanner import masked

POLICY_TOML = """
[actions]
secret = "redact"
pii = "redact"
"pii.phone" = "warn"
content = "warn"
"user.blocklist" = "block"

[blocklist]
words = ["zebra crossing", "falcon"]
patterns = ['\\bTICKET-[0-9]{3,6}\\b']

# Addresses in code would pass under the shipped rule; here only phone numbers do, so
# code fences still change decisions (warn outside, allow inside).
[[allow]]
id = "contact-details-in-code"
enabled = false

[[allow]]
id = "phones-in-code"
categories = ["pii.phone"]
where = "code"
"""

REDACTED = [
    f"sk-proj-{tok(156, URLSAFE)}",
    f"AKIA{tok(16, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567')}",
    f"ghp_{tok(36)}",
    f"AIza{tok(35, URLSAFE)}",
    f"xoxb-123456789012-1234567890123-{tok(24)}",
    jwt(),
    pem("RSA ", lines=5),
    f"aws_secret_access_key = {tok(40, B64)}",
    "jane.doe@corp-mail.net",
    luhn_complete("4", 16),
    "DE89 3704 0044 0532 0130 00",
    "536-22-1234",
]
WARNED = ["+44 20 7946 0958", "(415) 555-2671"]
BLOCKED = ["zebra crossing", "Falcon", "TICKET-4242"]
FILLER = st.text(alphabet="abcdefghij klmnop.,;:!?\n`~-'\"()", max_size=80)


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.from_toml(POLICY_TOML)


def stream(policy: Policy, text: str, cuts: list[int], destination: str = "local"):
    guard = OutputGuard(policy, destination)
    shown, notices, delays = [], [], []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(text))), len(text)]
    for a, b in zip(bounds, bounds[1:]):
        step = guard.feed(text[a:b])
        shown.append(step.text)
        notices += step.notices
        delays.append(b - sum(len(s) for s in shown))
    step = guard.finish()
    shown.append(step.text)
    notices += step.notices
    return "".join(shown), notices, delays, guard


def expected(policy: Policy, text: str, destination: str = "local"):
    result = scan(text, policy, destination)
    block = next((f for f in result.findings if f.action is SafetyAction.BLOCK), None)
    stop = block.span[0] if block else None
    spans = [(*f.span, f.category) for f in result.findings if f.action is SafetyAction.REDACT]
    notices = [
        f.notice("output")
        for f in result.findings
        if f.action is not SafetyAction.ALLOW and (stop is None or f.span[0] < stop or f is block)
    ]
    return masked(text, spans, upto=stop), notices, stop


def _key(notice):
    return (notice.span, notice.category, notice.rule)


@st.composite
def answers(draw, forbidden: list[str]):
    parts = [draw(FILLER)]
    chosen = []
    for _ in range(draw(st.integers(1, 3))):
        secret = draw(st.sampled_from(forbidden))
        chosen.append(secret)
        parts += [draw(st.sampled_from([" ", "\n", ": ", " (", "\n```\n"])), secret]
        parts += [draw(st.sampled_from([" ", "\n", ". ", ") ", "\n```\n"])), draw(FILLER)]
    text = "".join(parts)
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=40))
    return text, cuts, chosen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers(REDACTED + WARNED))
def test_streamed_secrets_never_show_and_match_a_whole_scan(policy, case):
    text, cuts, secrets = case
    shown, notices, _, guard = stream(policy, text, cuts)
    want, want_notices, _ = expected(policy, text)
    assert shown == want
    assert sorted(notices, key=_key) == sorted(want_notices, key=_key)
    assert not guard.blocked
    for secret in set(secrets) - set(WARNED):
        assert secret not in shown
        assert secret.strip()[-12:] not in shown  # nor its tail, where a split could leak it


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers(BLOCKED + REDACTED[:4]))
def test_after_a_block_nothing_more_is_released(policy, case):
    text, cuts, chosen = case
    assume(any(b in chosen for b in BLOCKED))
    shown, notices, _, guard = stream(policy, text, cuts)
    want, want_notices, stop = expected(policy, text)
    assert stop is not None and guard.blocked
    assert shown == want
    assert sorted(notices, key=_key) == sorted(want_notices, key=_key)
    for word in BLOCKED:
        assert word.lower() not in shown.lower()
    # Nothing from the block on: the text shown is the (redacted) prefix before it.
    assert text[stop:] not in shown or stop == len(text)


@settings(max_examples=150, deadline=None)
@given(FILLER, st.lists(st.integers(0, 80), max_size=30))
def test_clean_text_passes_unchanged_complete_and_promptly(policy, text, cuts):
    assume(not scan(text, policy).findings)
    shown, notices, delays, guard = stream(policy, text, cuts)
    assert shown == text and not notices
    assert all(delay <= guard.hold_back for delay in delays)


def test_a_secret_split_at_every_boundary_is_caught(policy):
    key = f"ghp_{tok(36)}"
    text = f"token {key} ok"
    for cut in range(len(text) + 1):
        shown, _, _, _ = stream(policy, text, [cut])
        assert shown == "token [REDACTED:secret.github_token] ok", cut
    for cut in range(1, len(text)):
        shown, _, _, _ = stream(policy, text, list(range(0, len(text), cut)))
        assert key not in shown


def test_one_character_deltas(policy):
    text = f"mail jane.doe@corp-mail.net and zebra crossing then {tok(40)}"
    shown, notices, _, guard = stream(policy, text, list(range(len(text))))
    assert shown == "mail [REDACTED:pii.email] and "
    assert guard.blocked
    assert [n.category for n in notices] == ["pii.email", "user.blocklist"]
    assert all(n.stage == "output" for n in notices)


def test_nothing_is_released_after_a_block():
    guard = OutputGuard(Policy.from_toml('[blocklist]\nwords = ["zebra crossing"]'))
    assert guard.hold_back < 20  # only the block list can hold text back here
    parts = ("Our plan: zeb", "ra crossing at noon, ", "then lunch.")
    steps = [guard.feed(part) for part in parts]
    assert "".join(s.text for s in steps) == "Our plan: "
    assert [s.blocked for s in steps] == [False, True, True]
    assert [n.rule for n in steps[1].notices] == ["blocklist:words"]
    assert guard.feed("anything").text == "" and guard.finish().text == ""


def test_hold_back_is_the_longest_hiding_rule(policy):
    shipped_local = OutputGuard(Policy.shipped(), "local")
    assert shipped_local.hold_back == 0  # nothing is redacted or blocked locally by default
    assert OutputGuard(Policy.shipped(), "remote").hold_back <= 32  # cards and national ids
    guard = OutputGuard(policy, "local")
    hiding = [
        d.reach for d in policy.detectors
        if policy.action_for(d.category, "local") in (SafetyAction.REDACT, SafetyAction.BLOCK)
    ]
    assert guard.hold_back == max(hiding)


def test_text_passes_immediately_when_nothing_can_hide_it():
    guard = OutputGuard(Policy.shipped(), "local")
    assert guard.feed("Hello wor").text == "Hello wor"
    assert guard.feed("ld, my key is AKIAIOSFODNN7EXAMP").text == "ld, my key is AKIAIOSFODNN7EXAMP"


def test_warnings_never_delay_text():
    policy = Policy.from_toml('[actions]\nsecret = "warn"')
    guard = OutputGuard(policy, "local")
    assert guard.hold_back == 0
    key = f"ghp_{tok(36)}"
    shown = guard.feed(f"here: {key}").text
    assert shown == f"here: {key}"
    step = guard.finish()
    assert [n.category for n in step.notices] == ["secret.github_token"]


def test_rescanning_is_incremental(policy):
    guard = OutputGuard(policy, "local")
    chunk = "The answer goes on and on, with nothing in it that any rule could want. "
    timings = []
    for _ in range(4):
        start = time.perf_counter()
        for _ in range(2000):
            guard.feed(chunk[:8])
            guard.feed(chunk[8:])
        timings.append(time.perf_counter() - start)
        # Only the hold-back and a trimming slack stay in memory, not the whole answer.
        assert len(guard._matcher._buf) < 2 * _TRIM_AT + guard.hold_back + len(chunk)
    # Per-delta cost does not grow with the answer (a full rescan would grow 4x here).
    assert timings[-1] < 2.5 * timings[0] + 0.05


def test_feed_after_finish_is_an_error(policy):
    guard = OutputGuard(policy)
    guard.feed("hi")
    guard.finish()
    with pytest.raises(RuntimeError):
        guard.feed("more")


def test_unknown_destination_is_refused(policy):
    with pytest.raises(ValueError, match="destination"):
        OutputGuard(policy, "cloud")
