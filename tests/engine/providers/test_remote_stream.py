"""The OpenAI wire format as the remote backend reads it (engine/inference/backends/remote_stream.py):
server-sent events into ChatChunks, a server's thinking as <think> tags, errors said by name."""

from __future__ import annotations

import asyncio
import json

import pytest

from wren.engine.inference.backends.remote_stream import (
    RemoteError,
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
    chunks = parse(f"data: {payload[:half]}\ndata: {payload[half:]}\n\ndata: " + payload.replace("joined", "last"))
    # a field split over two data: lines is joined by a newline, which JSON reads as space
    assert [c.text for c in chunks] == ["joined", "last"]


def test_thinking_becomes_think_tags_around_it():
    chunks = parse(event({"reasoning_content": "Let me see."}) + event({"reasoning": " Yes."})
                   + event({"content": "Four."}))
    tags = ThinkingTags()
    assert "".join(tags.text(c) for c in chunks) == "<think>Let me see. Yes.</think>Four."


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
