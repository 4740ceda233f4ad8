"""What leaves for a remote model: every message of the request, every role, through the
remote policy.

The message the user typed for this answer was already scanned as it was sent, and its
notices shown, so it keeps the policy's actions: a warning lets it go as typed. Everything
else (the system prompt, memories, attached and retrieved passages, summaries, earlier
turns, tool calls and results) goes without the user seeing it go, so a private finding
(a secret, personal data, a blocked word) that the policy would only warn about is
redacted there instead: a warning nobody can act on before the text leaves protects
nothing. Each finding becomes a SafetyNotice (stage "outgoing", its span in that message).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import SafetyAction, SafetyNotice
from .policy import Policy
from .scanner import PRIVATE_PREFIXES, Finding, masked, scan

STAGE = "outgoing"
_HIDES = (SafetyAction.REDACT, SafetyAction.BLOCK)
_NAMES = frozenset({"id", "type", "name", "role", "tool_call_id"})  # identifiers, not text


def _tightened(f: Finding) -> Finding:
    if f.action is SafetyAction.WARN and f.category.startswith(PRIVATE_PREFIXES):
        rule = f"{f.rule} (not typed now: redacted for a remote model)"
        return Finding(f.category, SafetyAction.REDACT, f.span, rule, f.preview, f.allowed_by)
    return f


def _clean(text: str, policy: Policy, typed_from: int | None, notices: list[SafetyNotice]) -> str:
    """`typed_from`: where the text the user typed now starts in `text` (None: nowhere; an
    attached file's text before the question is not typed, and is tightened)."""
    result = scan(text, policy, "remote")
    findings = [f if typed_from is not None and f.span[0] >= typed_from else _tightened(f)
                for f in result.findings]
    notices.extend(f.notice(STAGE) for f in findings if f.action is not SafetyAction.ALLOW)
    spans = [(f.span[0], f.span[1], f.category) for f in findings if f.action in _HIDES]
    return masked(text, spans) if spans else text


def _walk(content: Any, clean: Callable[[str], str]) -> Any:
    """Every string in a message's content (text, or a list of parts) through `clean`."""
    if isinstance(content, str):
        return clean(content)
    if isinstance(content, list):
        return [_walk(part, clean) for part in content]
    if isinstance(content, dict):
        return {k: (v if k in _NAMES else _walk(v, clean)) for k, v in content.items()}
    return content


def guard_outgoing(messages: list[dict], policy: Policy, typed: int | None = None, typed_text: str | None = None
                   ) -> tuple[list[dict], list[SafetyNotice]]:
    """The messages as they may leave for a remote model, and a notice per finding.
    `typed`: the index of the message the user typed for this answer, if any; `typed_text`:
    what they typed, where that message holds more (attached files' text before it)."""
    notices: list[SafetyNotice] = []
    out = []
    for i, message in enumerate(messages):
        def clean(text: str, typed_now: bool = i == typed) -> str:
            return _clean(text, policy, _typed_from(text, typed_text) if typed_now else None, notices)

        sent = dict(message)
        if "content" in sent:
            sent["content"] = _walk(sent["content"], clean)
        if isinstance(sent.get("tool_calls"), list):
            sent["tool_calls"] = _walk(sent["tool_calls"], clean)
        out.append(sent)
    return out, notices


def _typed_from(text: str, typed_text: str | None) -> int | None:
    """Where the typed question starts in its message: the message ends with it."""
    if typed_text is None:
        return 0
    if typed_text and text.endswith(typed_text):
        return len(text) - len(typed_text)
    return None  # another text of this message (a content part): none of it was typed now


def typed_index(messages: list[dict]) -> int | None:
    """The last user message: the question this answer is for."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return None
