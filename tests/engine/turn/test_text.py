"""engine/turn/text.py: one generation's text through the call parser, the output guard and
the log-probabilities, with the real parser, guard and policy."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from wren.engine.events import (
    Delta,
    Finished,
    FinishReason,
    PrefillProgress,
    SafetyAction,
    SafetyNotice,
    TokenLogprob,
    Usage,
)
from wren.engine.inference.sampling import SamplingParams
from wren.engine.logprobs import AnswerLogprobs
from wren.engine.safety import OutputGuard, Policy
from wren.engine.tools.parse import CallParser
from wren.engine.turn.text import AnswerText, generation

KEY = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1eF3hJ5kL7nP9rS1"  # built here: no key-shaped literal
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>'


def blocking_policy(tmp_path: Path, word: str) -> Policy:
    (tmp_path / "safety").mkdir(exist_ok=True)
    (tmp_path / "safety" / "policy.toml").write_text(f'[blocklist]\nwords = ["{word}"]\n')
    policy, warnings = Policy.load(tmp_path)
    assert warnings == []
    return policy


def text_of(events) -> str:
    return "".join(e.text for e in events if isinstance(e, Delta))


def feed_all(text: AnswerText, deltas: list[str], reason=FinishReason.STOP) -> list:
    out = []
    for d in deltas:
        out += text.feed(Delta(d))
    return out + text.feed(Finished(reason))


def test_plain_text_is_shown_whole_and_the_reason_kept():
    text = AnswerText(OutputGuard(Policy.shipped()), AnswerLogprobs(SamplingParams(), {}))
    out = feed_all(text, ["Hello ", "from ", "Wren."], FinishReason.LENGTH)
    assert text_of(out) == "Hello from Wren."
    assert all(isinstance(e, Delta) and e.logprobs is None for e in out)
    assert text.reason is FinishReason.LENGTH and not text.blocked and text.calls == []
    assert text.raw_len == len("Hello from Wren.")


def test_a_notice_about_an_answer_for_a_remote_model_is_at_the_whole_answers_offsets():
    shift = 100  # the raw text of the answer's earlier rounds
    text = AnswerText(OutputGuard(Policy.shipped(), "remote"), AnswerLogprobs(SamplingParams(), {}), shift=shift)
    out = feed_all(text, ["Your key is ", KEY[:10], KEY[10:], " keep it safe."])
    assert text_of(out) == f"Your key is {KEY} keep it safe."  # the shipped policy warns here
    notices = [e for e in out if isinstance(e, SafetyNotice)]
    assert [(n.category, n.action) for n in notices] == [("secret.openai_key", SafetyAction.WARN)]
    start = len("Your key is ")
    assert notices[0].span == (start + shift, start + len(KEY) + shift)


def test_a_blocked_phrase_ends_the_text_and_nothing_after_it_shows(tmp_path):
    text = AnswerText(OutputGuard(blocking_policy(tmp_path, "forbidden phrase")),
                      AnswerLogprobs(SamplingParams(), {}))
    out = []
    for d in ["Sure, here is the forbidden ", "phrase you wanted", " and more after it."]:
        out += text.feed(Delta(d))
        if text.blocked:
            break
    assert text.blocked
    assert "forbidden" not in text_of(out).lower() and "after it" not in text_of(out)
    assert any(isinstance(e, SafetyNotice) and e.action is SafetyAction.BLOCK for e in out)


def test_a_call_is_kept_aside_and_what_follows_it_is_not_shown():
    text = AnswerText(OutputGuard(Policy.shipped()), AnswerLogprobs(SamplingParams(), {}), CallParser("hermes"))
    out = []
    for d in ["Let me compute.", CALL[:20], CALL[20:], "\nmore words the model went on with"]:
        out += text.feed(Delta(d))
    assert text.calls_complete
    out += text.feed(Delta("and even more"))
    out += text.feed(Finished(FinishReason.STOP))
    assert text_of(out) == "Let me compute."
    assert [(c.name, c.arguments) for c in text.calls] == [("calculator", {"expression": "2+2"})]


def test_each_shown_delta_carries_the_probabilities_of_its_tokens():
    probs = AnswerLogprobs(SamplingParams(logprobs=0), {})
    text = AnswerText(OutputGuard(Policy.shipped()), probs)
    out = []
    out += text.feed(Delta("Hi", (TokenLogprob("Hi", 5, -0.1),)))
    out += text.feed(Delta(" there", (TokenLogprob(" there", 6, -0.2),)))
    out += text.feed(Finished(FinishReason.STOP))
    shown = [e for e in out if isinstance(e, Delta)]
    assert "".join(e.text for e in shown) == "Hi there"
    tokens = [t.token for e in shown for t in (e.logprobs or ())]
    assert tokens == ["Hi", " there"]


class _Request:
    """The part of a GenerationRequest `generation` touches: its cancel event."""

    def __init__(self) -> None:
        self.cancel = threading.Event()


def test_generation_passes_other_events_through_and_stops_a_request_once_its_calls_are_complete():
    async def main():
        queue: asyncio.Queue = asyncio.Queue()
        for event in (PrefillProgress(10, 20), Delta("Sure."), Delta(CALL), Delta(" trailing"),
                      Usage(20, 5, 0.01, 100.0), Finished(FinishReason.CANCELLED)):
            queue.put_nowait(event)
        request = _Request()
        text = AnswerText(OutputGuard(Policy.shipped()), AnswerLogprobs(SamplingParams(), {}), CallParser("hermes"))
        out = [e async for e in generation(queue, text, request)]
        return out, text, request

    out, text, request = asyncio.run(main())
    assert isinstance(out[0], PrefillProgress) and any(isinstance(e, Usage) for e in out)
    assert text_of(out) == "Sure."
    assert request.cancel.is_set() and len(text.calls) == 1 and text.reason is FinishReason.CANCELLED


def test_generation_ends_at_a_block_without_waiting_for_the_finish(tmp_path):
    async def main():
        queue: asyncio.Queue = asyncio.Queue()
        queue.put_nowait(Delta("the forbidden phrase"))
        queue.put_nowait(Delta(" and on"))  # no Finished ever comes
        text = AnswerText(OutputGuard(blocking_policy(tmp_path, "forbidden phrase")),
                          AnswerLogprobs(SamplingParams(), {}))
        return [e async for e in generation(queue, text, _Request())], text

    out, text = asyncio.run(asyncio.wait_for(main(), 5))
    assert text.blocked and "forbidden" not in text_of(out)
