"""Words for safety categories and actions, as the window shows them to people."""

from __future__ import annotations

from wren.engine.events import SafetyAction
from wren.engine.safety.care import is_care_category
from wren.engine.safety.scanner import Finding, placeholder

NAMES = {
    "secret.openai_key": "OpenAI API key",
    "secret.anthropic_key": "Anthropic API key",
    "secret.aws_access_key": "AWS access key",
    "secret.aws_secret_key": "AWS secret key",
    "secret.github_token": "GitHub token",
    "secret.gitlab_token": "GitLab token",
    "secret.slack_token": "Slack token",
    "secret.slack_webhook": "Slack webhook",
    "secret.stripe_key": "Stripe key",
    "secret.google_api_key": "Google API key",
    "secret.private_key": "private key",
    "secret.jwt": "JSON web token",
    "secret.password": "password",
    "secret.connection_string": "connection string with a password",
    "pii.email": "email address",
    "pii.phone": "phone number",
    "pii.payment_card": "payment card number",
    "pii.iban": "bank account number (IBAN)",
    "pii.national_id": "national ID number",
    "content.self_harm": "self-harm",
    "user.blocklist": "a word or pattern from your block list",
}
GROUPS = {"secret": "Secrets", "pii": "Personal data", "content": "Sensitive topics", "user": "Your block list"}
ACTIONS = {
    SafetyAction.ALLOW: "Allow",
    SafetyAction.WARN: "Warn",
    SafetyAction.REDACT: "Redact",
    SafetyAction.BLOCK: "Block",
}
ACTION_HINTS = {
    SafetyAction.ALLOW: "say nothing",
    SafetyAction.WARN: "show what was found and ask before sending",
    SafetyAction.REDACT: "replace it with [REDACTED:…] before it is sent or shown",
    SafetyAction.BLOCK: "refuse: the message is not sent, the answer stops",
}


def category_label(category: str) -> str:
    """The thing itself ("email address", "self harm"); `group_label` says what kind."""
    if category in NAMES:
        return NAMES[category]
    group, _, name = category.partition(".")
    return (name or group).replace("_", " ")


def category_phrase(category: str) -> str:
    """A category on its own in a sentence: a topic needs saying that it is one."""
    if category.startswith("content."):
        return f"the topic “{category_label(category)}”"
    return category_label(category)


def group_label(category: str) -> str:
    return GROUPS.get(category.partition(".")[0], "Other")


def finding_line(finding: Finding) -> str:
    """One finding: what it is, what it looked like (masked), which rule, and what happens."""
    what = category_phrase(finding.category)
    what = what[:1].upper() + what[1:]
    # A preview that reveals nothing ("… (7 chars)") says less than the selection Edit makes.
    shown = f" “{finding.preview}”" if finding.preview and not finding.preview.startswith("…") else ""
    rule = finding.rule + (f", lowered by the allow rule {finding.allowed_by}" if finding.allowed_by else "")
    if finding.action is SafetyAction.REDACT:
        outcome = f"will be sent as {placeholder(finding.category)}"
    elif finding.action is SafetyAction.BLOCK:
        outcome = "not allowed"
    else:
        outcome = "check before sending"
    return f"{what}{shown}: {outcome} — rule {rule}, category {finding.category}"


def shown_notices(notices: list) -> list:
    """Findings the window mentions: care categories (self-harm) get care, not a safety line;
    their rule ids stay in the stored notices, for diagnostics."""
    def category(n) -> str:
        return n["category"] if isinstance(n, dict) else n.category
    return [n for n in notices if not is_care_category(category(n))]
