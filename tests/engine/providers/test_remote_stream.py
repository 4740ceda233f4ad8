"""The OpenAI wire format as the remote backend reads it (engine/inference/backends/remote_stream.py):
server-sent events into ChatChunks, a server's thinking as <think> tags, errors said by name."""

from __future__ import annotations

import asyncio
import json

import pytest

from wren.engine.inference.backends.remote_stream import (
    RemoteError,
    RemoteInterrupted,
    RemoteProtocolError,
    ThinkingTags,
    error_message,
    parse_stream,
)


async def _lines(text: str):
    for line in text.split("\n"):
        yield line


def parse(text: str):
    async def main():
        return [chunk async for chunk in parse_stream(_lines(text), "http://127.0.0.1:9/v1")]
    return asyncio.run(main())


def event(delta: dict | None = None, finish=None, usage=None) -> str:
    body: dict = {"choices": [{"delta": delta or {}, "finish_reason": finish}]}
    if usage is not None:
        body = {"choices": [], "usage": usage}
    return f"data: {json.dumps(body)}\n\n"


def test_events_become_chunks_and_the_stream_reads_to_its_end():
    text = (": keep-alive\n\n" + event({"role": "assistant"}) + "event: message\nid: 3\n"
            + event({"content": "Hel"}) + event({"content": "lo"}, finish="length")
            + event(usage={"prompt_tokens": 7, "completion_tokens": 2}) + "data: [DONE]\n\n"
            + event({"content": "after done"}))
    chunks = parse(text)
    assert [c.text for c in chunks] == ["Hel", "lo", ""]
    assert chunks[1].finish_reason == "length"
    assert (chunks[2].prompt_tokens, chunks[2].completion_tokens) == (7, 2)


def test_a_data_field_over_several_lines_and_a_last_event_without_its_blank_line():
    payload = json.dumps({"choices": [{"delta": {"content": "joined"}, "finish_reason": None}]})
    half = len(payload) // 2
    last = payload.replace("joined", "last").replace('"finish_reason": null', '"finish_reason": "stop"')
    chunks = parse(f"data: {payload[:half]}\ndata: {payload[half:]}\n\ndata: " + last)
    # a field split over two data: lines is joined by a newline, which JSON reads as space
    assert [c.text for c in chunks] == ["joined", "last"]


def test_thinking_becomes_think_tags_around_it():
    chunks = parse(event({"reasoning_content": "Let me see."}) + event({"reasoning": " Yes."})
                   + event({"content": "Four."}) + "data: [DONE]\n\n")
    tags = ThinkingTags()
    assert "".join(tags.text(c) for c in chunks) == "<think>Let me see. Yes.</think>Four."


def test_a_stream_that_ends_before_the_answer_did_is_an_interruption():
    """A server that closes the connection mid-answer (no finish_reason, no [DONE]): what came
    is given, then RemoteInterrupted (the fragment was stored as a complete answer)."""
    chunks: list = []

    async def main():
        async for chunk in parse_stream(_lines(event({"content": "Hello, this is the start of a long"})), "srv"):
            chunks.append(chunk)

    with pytest.raises(RemoteInterrupted, match="ended before the answer did"):
        asyncio.run(main())
    assert [c.text for c in chunks] == ["Hello, this is the start of a long"]
    with pytest.raises(RemoteInterrupted, match="; nothing of the answer came$"):  # not "the partial answer is kept"
        parse(": keep-alive\n\n")
    # either end is enough: a finish_reason (some servers send no [DONE]), or [DONE]
    assert parse(event({"content": "Hi"}) + event({}, finish="stop"))[-1].finish_reason == "stop"
    assert [c.text for c in parse(event({"content": "Hi"}) + "data: [DONE]")] == ["Hi"]


def test_a_response_that_is_not_an_event_stream():
    """A server that ignores stream=true and sends the whole completion gives that answer;
    anything else (a proxy's HTML page) says what came (it read as an empty answer)."""
    from wren.engine.inference.backends.remote_stream import whole_answer

    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 9, "completion_tokens": 2}})
    chunk = whole_answer(body, "application/json", "srv")
    assert (chunk.text, chunk.finish_reason, chunk.prompt_tokens, chunk.completion_tokens) == ("Paris.", "stop", 9, 2)
    with pytest.raises(RemoteProtocolError, match="srv answered with text/html, not an event stream or a chat "
                                                  "completion: '<html><body>oops, the proxy</body></html>'"):
        whole_answer("<html><body>oops, the proxy</body></html>", "text/html", "srv")
    with pytest.raises(RemoteError, match="srv reported an error: over quota"):
        whole_answer('{"error": {"message": "over quota"}}', "application/json", "srv")


def test_bad_streams_and_error_bodies_say_what_was_wrong():
    with pytest.raises(RemoteProtocolError, match="not JSON"):
        parse("data: {oops\n\n")
    with pytest.raises(RemoteProtocolError, match="not a JSON object"):
        parse("data: [1, 2]\n\n")
    with pytest.raises(RemoteError, match="mid-stream: model overloaded"):
        parse('data: {"error": {"message": "model overloaded"}}\n\n')
    assert error_message('{"error": "quota"}') == "quota"
    assert error_message('{"message": "no such model"}') == "no such model"
    assert error_message("  ") == "no details"
