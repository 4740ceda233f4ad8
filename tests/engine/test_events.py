"""Events survive a trip through JSON: event_from_dict(event_to_dict(e)) == e."""

from __future__ import annotations

import json

import pytest

from wren.engine import events as E

EVERY_KIND = [
    E.Started(1, 2, 3, "model", "torch-cpu"),
    E.PrefillProgress(512, 4096),
    E.Delta("hello"),
    E.Delta("hé", (E.TokenLogprob("hé", 5, -0.25, (E.TopLogprob("hé", 5, -0.25), E.TopLogprob("ha", 6, -2.0))),)),
    E.Reasoning("First, the user asks"),
    E.Usage(31, 12, 0.05, 60.5, 24),
    E.Usage(31, 12, 0.05, 60.5, 24, 9),
    E.SafetyNotice("secret.aws_access_key", E.SafetyAction.REDACT, (4, 24), "aws", "output"),
    E.MemoryNotice((E.MemoryRef(1, "likes tea"),), (E.MemoryRef(2, "old"),), ("too long",), ("cats",),
                   ("works nights",), True, "memory is off"),
    E.ToolCall("call_1", "calculator", {"expression": "2+2"}),
    E.ToolApprovalNeeded("call_1", "shell", {"command": "ls"}),
    E.ToolResult("call_1", "4", False, 0.01),
    E.TitleUpdate(1, "Tea"),
    E.AnswerNotice(E.NoticeKind.TOOL_NOT_CALLED, "tiny answered without calling the calculator tool"),
    E.Citation(1, "/docs/manual.md", {"heading": ["Setup"], "lines": [3, 9]}, "Setup, lines 3-9", "Run make.", 7),
    E.Finished(E.FinishReason.CANCELLED, 3),
    E.Failed("the model stopped", E.FailureKind.MODEL),
]


def test_every_kind_of_event_is_listed():
    assert {type(e) for e in EVERY_KIND} == set(E.Event.__args__)


@pytest.mark.parametrize("event", EVERY_KIND, ids=lambda e: type(e).__name__)
def test_an_event_comes_back_equal_from_json(event):
    assert E.event_from_dict(json.loads(json.dumps(E.event_to_dict(event)))) == event


def test_unreadable_dicts_say_what_is_wrong():
    with pytest.raises(ValueError, match="not an event"):
        E.event_from_dict({"type": "gossip"})
    with pytest.raises(ValueError, match="started event"):
        E.event_from_dict({"type": "started", "conversation_id": 1})
    with pytest.raises(ValueError, match="finished event that cannot be read"):
        E.event_from_dict({"type": "finished", "reason": "later"})
