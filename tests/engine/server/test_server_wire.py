"""A streamed OpenAI delta's bytes: OpenAIAnswer.delta_chunk encodes only the text per token,
between the chunk's fixed bytes cut out once, and must give exactly the bytes of encoding
the whole chunk, for every text a model can produce."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wren.engine.events import Delta, TokenLogprob, TopLogprob
from wren.engine.server.wire import OpenAIAnswer, sse

TRICKY = ["", " lighthouse", 'a "quoted" word', "back\\slash", "line\nbreak\ttab\r", "\x00\x01\x1f\x7f",
          "é ü 🙂 中文", "\u2028\u2029", "\ud7ff", "}], \"usage\": null}", "\\u0000", "data: [DONE]\n\n"]


def _whole(answer: OpenAIAnswer, event: Delta, include_usage: bool) -> bytes:
    return sse(answer.chunk({"content": event.text} if answer.chat else event.text, include_usage=include_usage))


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("include_usage", [True, False])
def test_delta_chunk_is_the_whole_chunks_bytes(chat, include_usage):
    answer = OpenAIAnswer("chatcmpl-0123abcd", 1_764_000_000, 'a "model" named é', chat)
    for text in TRICKY:
        event = Delta(text)
        got = answer.delta_chunk(event, include_usage=include_usage)
        assert got == _whole(answer, event, include_usage)
        body = json.loads(got.decode().removeprefix("data: "))
        assert (body["choices"][0]["delta"]["content"] if chat else body["choices"][0]["text"]) == text


@settings(max_examples=300, deadline=None)
@given(st.text(), st.booleans(), st.booleans())
def test_delta_chunk_matches_for_any_text(text, chat, include_usage):
    answer = OpenAIAnswer("cmpl-x", 1, "m", chat)
    event = Delta(text)
    assert answer.delta_chunk(event, include_usage=include_usage) == _whole(answer, event, include_usage)


def test_with_logprobs_each_chunk_carries_its_tokens():
    answer = OpenAIAnswer("chatcmpl-1", 1, "m", True, logprobs=True)
    entry = TokenLogprob(" hi", 7, -0.25, (TopLogprob(" hi", 7, -0.25), TopLogprob(" ho", 8, -1.5)))
    body = json.loads(answer.delta_chunk(Delta(" hi", (entry,))).decode().removeprefix("data: "))
    content = body["choices"][0]["logprobs"]["content"]
    assert content[0]["token"] == " hi" and content[0]["logprob"] == -0.25
    assert [t["token"] for t in content[0]["top_logprobs"]] == [" hi", " ho"]


def test_a_model_name_holding_the_mark_falls_back_to_whole_chunks():
    from wren.engine.server import wire

    answer = OpenAIAnswer("chatcmpl-1", 1, wire._MARK, True)  # the frame cannot be cut cleanly
    event = Delta("text")
    assert answer.delta_chunk(event) == _whole(answer, event, False)
