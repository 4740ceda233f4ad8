"""Loading, merging and validating policies; allow rules; what scan() reports."""

from __future__ import annotations

import pytest
from safety_samples import tok

from wren.engine.events import SafetyAction
from wren.engine.safety import Policy, PolicyError, redact, scan

ALLOW, WARN, REDACT, BLOCK = (
    SafetyAction.ALLOW, SafetyAction.WARN, SafetyAction.REDACT, SafetyAction.BLOCK,
)  # fmt: skip


def write_policy(home, text: str):
    folder = home / "safety"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def same_actions(a: Policy, b: Policy) -> bool:
    categories = {d.category for d in a.detectors} | {d.category for d in b.detectors}
    return all(
        a.action_for(c, d) is b.action_for(c, d) for c in categories for d in ("local", "remote")
    )


def test_shipped_policy_defaults():
    p = Policy.shipped()
    assert p.action_for("secret.openai_key", "local") is ALLOW
    assert p.action_for("secret.openai_key", "remote") is WARN
    assert p.action_for("pii.payment_card", "remote") is REDACT
    assert p.action_for("content.self_harm", "local") is WARN
    assert p.action_for("user.blocklist", "local") is BLOCK
    assert p.action_for("nothing.known", "remote") is ALLOW


def test_load_without_a_user_file(tmp_path, monkeypatch):
    monkeypatch.setenv("WREN_HOME", str(tmp_path))
    policy, warnings = Policy.load()
    assert warnings == []
    assert same_actions(policy, Policy.shipped())


def test_user_file_merges_over_the_shipped_one(tmp_path):
    write_policy(tmp_path, """
[actions]
secret = { remote = "block" }
pii = "redact"

[blocklist]
words = ["Project Falcon"]
""")
    policy, warnings = Policy.load(tmp_path)
    assert warnings == []
    assert policy.action_for("secret.jwt", "remote") is BLOCK
    assert policy.action_for("secret.jwt", "local") is ALLOW  # only remote was changed
    # "pii" replaces the shipped "pii.payment_card" entry too.
    assert policy.action_for("pii.payment_card", "local") is REDACT
    assert scan("about project falcon", policy).action is BLOCK


@pytest.mark.parametrize(
    "text, line, words",
    [
        ('[actions]\nsecret = "warn"\npii = { remote = "block" \n', 3, ["policy.toml"]),
        ('[actions]\nsecret = "warn"\n"pii.email" = "blokc"\n', 3, ["blokc", "not an action"]),
        ('[blocklist]\nwords = ["a"]\npatterns = [\n  "ok[0-9]{2}",\n  "bad(",\n]\n', 5,
         ["'bad('", "not a valid regular expression"]),
        ('[blocklist]\npatterns = ["^start"]\n', 2, ["'^start'", "^ or $"]),
        ('[blocklist]\npatterns = ["x?"]\n', 2, ["empty string"]),
        ('[[allow]]\nid = "mine"\nwhere = "codeblock"\n', 3, ["'codeblock'"]),
        ('[[allow]]\nid = "mine"\ncategories = ["pii"]\naction = "block"\n', 4, ["'allow' or 'warn'"]),
        ('[[allow]]\nid = "everything"\nwhere = "code"\n', 2, ["would allow everything"]),
        ('colour = "red"\n', 1, ["unknown setting 'colour'"]),
    ],
)
def test_invalid_user_policy_names_the_line_and_falls_back(tmp_path, text, line, words):
    path = write_policy(tmp_path, text)
    policy, warnings = Policy.load(tmp_path)
    assert len(warnings) == 1, warnings
    message = warnings[0]
    assert str(path) in message and f"line {line}" in message, message
    for word in words:
        assert word in message, message
    assert "using the shipped safety policy" in message
    assert same_actions(policy, Policy.shipped())


def test_from_toml_raises_with_the_line():
    with pytest.raises(PolicyError, match=r"mine.toml, line 2: .*'\(unclosed'"):
        Policy.from_toml('[blocklist]\npatterns = ["(unclosed"]\n', "mine.toml")


def test_slow_or_unbounded_user_patterns_load_with_a_warning(tmp_path):
    write_policy(tmp_path, '[blocklist]\npatterns = ["secret-[a-z]+", "(a+)+b"]\n')
    policy, warnings = Policy.load(tmp_path)
    assert any("no length limit" in w for w in warnings)
    assert any("nests unbounded repeats" in w for w in warnings)
    assert scan("a secret-plan", policy).action is BLOCK


def test_unknown_category_is_reported(tmp_path):
    write_policy(tmp_path, '[actions]\nsecrets = "block"\n')
    _, warnings = Policy.load(tmp_path)
    assert warnings == [f"{tmp_path / 'safety' / 'policy.toml'}, line 2: category 'secrets' "
                        "matches no detector; it has no effect"]


def test_unreadable_user_file_falls_back(tmp_path):
    path = tmp_path / "safety" / "policy.toml"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xff\xfe not utf-8")
    policy, warnings = Policy.load(tmp_path)
    assert len(warnings) == 1 and str(path) in warnings[0]
    assert same_actions(policy, Policy.shipped())


def test_user_word_lists_add_categories(tmp_path):
    folder = tmp_path / "safety" / "wordlists"
    folder.mkdir(parents=True)
    (folder / "gambling.txt").write_text("# mine\nplace a bet\nsports betting\n", encoding="utf-8")
    write_policy(tmp_path, '[actions]\n"content.gambling" = "block"\n')
    policy, warnings = Policy.load(tmp_path)
    assert warnings == []
    result = scan("how do I place a  bet online", policy)
    assert [(f.category, f.action) for f in result.findings] == [("content.gambling", BLOCK)]


def test_documented_example_keys_pass_even_when_secrets_block():
    policy = Policy.from_toml('[actions]\nsecret = "block"\n')
    text = "aws_access_key_id = AKIAIOSFODNN7EXAMPLE"
    result = scan(text, policy, "remote")
    assert result.action is ALLOW
    assert result.findings[0].allowed_by == "aws-documentation-examples"
    assert result.notices() == []
    real = scan("aws_access_key_id = AKIAQ2ZK7MPLW3XR5TYV", policy, "remote")
    assert real.action is BLOCK


def test_key_shaped_string_in_a_code_sample_the_policy_allows():
    policy = Policy.from_toml("""
[actions]
secret = "block"

[[allow]]
id = "openai-keys-in-code"
categories = ["secret.openai_key"]
where = "code"
""")
    key = f"sk-{tok(48)}"
    sample = f"Set it like this:\n\n```python\nclient = OpenAI(api_key=\"{key}\")\n```\n"
    inside = scan(sample, policy, "remote")
    assert inside.action is ALLOW
    assert inside.findings[0].allowed_by == "openai-keys-in-code"
    outside = scan(f"my key is {key}", policy, "remote")
    assert outside.action is BLOCK
    after = scan(sample + f"and the real one {key}", policy, "remote")
    assert [f.action for f in after.findings] == [ALLOW, BLOCK]


def test_addresses_in_code_are_allowed_by_the_shipped_policy():
    text = "```\nuser = User(email='jane.doe@corp-mail.net')\n```\nwrite to jane.doe@corp-mail.net"
    result = scan(text, Policy.shipped(), "remote")
    assert [f.action for f in result.findings] == [ALLOW, WARN]


def test_user_can_disable_a_shipped_allow_rule():
    policy = Policy.from_toml('[[allow]]\nid = "aws-documentation-examples"\nenabled = false\n')
    assert scan("AKIAIOSFODNN7EXAMPLE", policy, "remote").action is WARN


def test_allow_rule_can_downgrade_to_warn():
    policy = Policy.from_toml("""
[actions]
"pii.email" = "block"
[[allow]]
id = "work-addresses"
patterns = ['[^@]+@corp-mail\\.net']
action = "warn"
""")
    assert scan("mail bob@corp-mail.net", policy).action is WARN
    assert scan("mail bob@elsewhere.org", policy).action is BLOCK


def test_scan_result_fields():
    key = f"ghp_{tok(36)}"
    policy = Policy.from_toml('[actions]\nsecret = "redact"\n"pii.email" = "warn"\n')
    text = f"token {key} from ann@corp-mail.net"
    result = scan(text, policy, "remote")
    assert result.action is REDACT
    assert result.redacted_text == "token [REDACTED:secret.github_token] from ann@corp-mail.net"
    github, email = result.findings
    assert github.span == (6, 6 + len(key)) and github.rule == "github-token"
    assert key not in github.preview and github.preview.startswith("ghp_")
    assert "ann" not in email.preview
    notices = result.notices("input")
    assert [(n.category, n.action, n.stage) for n in notices] == [
        ("secret.github_token", REDACT, "input"), ("pii.email", WARN, "input"),
    ]  # fmt: skip


def test_destination_decides():
    key = f"glpat-{tok(20)}"
    assert scan(key, Policy.shipped(), "local").action is ALLOW
    assert scan(key, Policy.shipped(), "remote").action is WARN
    with pytest.raises(ValueError):
        scan(key, Policy.shipped(), "elsewhere")


def test_redact_masks_everything_private_whatever_the_policy():
    text = (
        "key AKIAIOSFODNN7EXAMPLE, mail ann@example.com, card 4111 1111 1111 1111, "
        "call +44 20 7946 0958, I feel like I want to die"
    )
    out = redact(text)
    assert out == (
        "key [REDACTED:secret.aws_access_key], mail [REDACTED:pii.email], card "
        "[REDACTED:pii.payment_card], call [REDACTED:pii.phone], I feel like I want to die"
    )
    policy = Policy.from_toml('[blocklist]\nwords = ["falcon"]\n')
    assert redact("project falcon", policy) == "project [REDACTED:user.blocklist]"
    assert redact("") == ""
