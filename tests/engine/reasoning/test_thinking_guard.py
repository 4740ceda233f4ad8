"""The thinking is model output: the same safety policy redacts or blocks it, through its
own output guard (engine/turn/text.py), with the real policy and guard."""

from __future__ import annotations

from pathlib import Path

from wren.engine.events import Delta, Finished, FinishReason, Reasoning, SafetyAction, SafetyNotice
from wren.engine.inference.reasoning import ThinkSplitter
from wren.engine.inference.sampling import SamplingParams
from wren.engine.logprobs import AnswerLogprobs
from wren.engine.safety import OutputGuard, Policy
from wren.engine.turn.text import AnswerText

KEY = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1eF3hJ5kL7nP9rS1"  # built here: no key-shaped literal


def run(policy: Policy, text: str, destination: str = "local") -> tuple[list, AnswerText]:
    answer = AnswerText(OutputGuard(policy, destination), AnswerLogprobs(SamplingParams(), {}),
                        split=ThinkSplitter(), thinking_guard=lambda: OutputGuard(policy, destination))
    out = []
    for i in range(0, len(text), 3):
        out += answer.feed(Delta(text[i:i + 3]))
        if answer.blocked:
            break
    return out + ([] if answer.blocked else answer.feed(Finished(FinishReason.STOP))), answer


def test_a_secret_in_the_thinking_gets_the_notice_an_answer_would():
    out, answer = run(Policy.shipped(), f"<think>\nThe key is {KEY} so I use it.\n</think>\n\nDone.", "remote")
    thinking = "".join(e.text for e in out if isinstance(e, Reasoning))
    assert thinking == f"The key is {KEY} so I use it.\n"  # the shipped policy warns on a remote answer
    notices = [e for e in out if isinstance(e, SafetyNotice)]
    assert [(n.category, n.action, n.stage) for n in notices] == [("secret.openai_key", SafetyAction.WARN, "output")]
    assert "".join(e.text for e in out if isinstance(e, Delta)) == "Done."
    assert not answer.blocked


def test_a_blocked_word_in_the_thinking_blocks_the_answer(tmp_path: Path):
    (tmp_path / "safety").mkdir()
    (tmp_path / "safety" / "policy.toml").write_text('[blocklist]\nwords = ["forbiddenword"]\n')
    policy, warnings = Policy.load(tmp_path)
    assert warnings == []
    out, answer = run(policy, "<think>\nI will say forbiddenword here.\n</think>\n\nAnswer text.")
    assert answer.blocked
    assert "forbiddenword" not in "".join(e.text for e in out if isinstance(e, Reasoning))
    assert not any(isinstance(e, Delta) for e in out)
    assert any(isinstance(e, SafetyNotice) and e.action is SafetyAction.BLOCK for e in out)
