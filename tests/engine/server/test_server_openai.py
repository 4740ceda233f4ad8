"""`wren serve`'s OpenAI-compatible endpoints, driven by the official `openai` client and httpx."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from wren.engine.server.app import ServerOptions

ANSWER = "The capital of France is Paris. 🥐"
LONG = " ".join(f"word{i}" for i in range(300))


def run(coro):
    return asyncio.run(coro)


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key, max_retries=0, timeout=30)


def test_openai_client_streams_a_chat_completion_with_usage_and_lists_models(serving):
    async def main():
        async with serving(ANSWER) as s:
            api = client(s)
            models = await api.models.list()
            stream = await api.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "What is the capital of France?"}],
                stream=True, stream_options={"include_usage": True}, temperature=0)
            chunks = [chunk async for chunk in stream]
            direct = [e async for e in s.server.web.answers.stateless_chat(
                [{"role": "user", "content": "What is the capital of France?"}],
                await s.engine.settings.default_sampling("tiny"))]
            listed = await s.engine.conversations.list()
            return models, chunks, direct, listed

    models, chunks, direct, listed = run(main())
    assert [m.id for m in models.data] == ["tiny"]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == ["stop"]
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0].choices == [] and chunks[-1] is usage_chunks[0]
    usage = usage_chunks[0].usage
    engine_usage = next(e for e in direct if type(e).__name__ == "Usage")
    assert usage.completion_tokens == engine_usage.completion_tokens > 5
    assert usage.prompt_tokens == engine_usage.prompt_tokens > 5
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert listed == []  # the OpenAI endpoint keeps no chats


def test_blocking_chat_and_text_completions_report_usage(serving):
    async def main():
        async with serving(ANSWER) as s:
            api = client(s)
            whole = await api.chat.completions.create(
                model="tiny", messages=[{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Capital of France?"}], max_tokens=200)
            # A raw completion: the prompt is continued as given, no chat template; ending it
            # where the template starts an answer makes the scripted model answer.
            tokenizer = s.engine.loaded_worker.tokenizer
            prompt = tokenizer.render_chat([{"role": "user", "content": "Capital of France?"}])
            text = await api.completions.create(model="tiny", prompt=prompt, max_tokens=4)
            streamed = await api.completions.create(model="tiny", prompt=prompt, stream=True,
                                                    stream_options={"include_usage": True})
            parts = [c async for c in streamed]
            return whole, text, parts, tokenizer.count(prompt)

    whole, text, parts, prompt_tokens = run(main())
    assert whole.choices[0].message.content == ANSWER and whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens > 5 and whole.usage.prompt_tokens > 5
    assert whole.object == "chat.completion"
    assert text.object == "text_completion" and text.choices[0].finish_reason == "length"
    assert text.usage.completion_tokens == 4 and ANSWER.startswith(text.choices[0].text)
    assert text.usage.prompt_tokens == prompt_tokens
    assert "".join(c.choices[0].text for c in parts if c.choices) == ANSWER
    assert parts[-1].usage.prompt_tokens == prompt_tokens and parts[-1].choices == []


@pytest.mark.parametrize("field,value,word", [
    # the old function-calling fields (tools and tool_choice are served: test_server_tools.py)
    ("functions", [{"name": "get_weather", "parameters": {"type": "object"}}], "functions"),
    ("function_call", "auto", "function_call"),
    ("n", 2, "n other than 1"),
    ("presence_penalty", 0.5, "presence_penalty"),
])
def test_fields_wren_cannot_honour_are_refused_with_a_clear_400(serving, field, value, word):
    async def main():
        async with serving(ANSWER) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers) as http:
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], field: value}
            refused = await http.post("/v1/chat/completions", json=body)
            plain = await http.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "text"},
                "tool_choice": "none"})
            return refused, plain

    refused, plain = run(main())
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert word in error["message"] and "not supported" in error["message"]
    assert plain.status_code == 200 and plain.json()["choices"][0]["message"]["content"] == ANSWER


def test_max_tokens_takes_whole_numbers_written_as_floats_and_names_its_limit(serving):
    async def main():
        async with serving(ANSWER) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers) as http:
            ask = [{"role": "user", "content": "hi"}]
            return [await http.post("/v1/chat/completions", json={"messages": ask, "max_tokens": limit})
                    for limit in (4.0, 1e9, 2.5, 0)]

    whole, huge, fraction, zero = run(main())
    assert whole.status_code == 200, whole.text
    assert huge.status_code == 400 and "from 1 to 1,000,000, got 1000000000" in huge.json()["error"]["message"]
    assert fraction.status_code == 400 and "whole number from 1 to 1,000,000, got 2.5" in fraction.json()["error"]["message"]
    assert zero.status_code == 400 and zero.json()["error"]["param"] == "max_tokens"


def test_bad_requests_name_what_is_wrong(serving):
    async def main():
        async with serving(ANSWER, context_length=64) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers) as http:
            await s.engine.providers.add("lab", "http://127.0.0.1:9/v1", models=("m1", "m2"), discover=False)
            unlisted = await http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                     "model": "lab/nosuch"})
            assert unlisted.status_code == 404, unlisted.text  # the provider's models named, not only local ones
            assert unlisted.json()["error"]["message"] == ("the provider lab lists no model 'nosuch' (it lists m1, m2); "
                                                           "`wren providers add` with --model adds one")
            return [await http.post("/v1/chat/completions", **kw) for kw in (
                {"content": b"{not json"},
                {"json": {"messages": []}},
                {"json": {"messages": [{"role": "wizard", "content": "hi"}]}},
                {"json": {"messages": [{"role": "user", "content": "hi"}], "model": "nonesuch"}},
                {"json": {"messages": [{"role": "user", "content": "hi"}], "temperature": 9}},
                {"json": {"messages": [{"role": "user", "content": LONG}]}},
            )]

    bad_json, empty, role, model, temperature, too_long = run(main())
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]
    assert empty.status_code == 400 and "messages" in empty.json()["error"]["message"]
    assert role.status_code == 400 and "wizard" in role.json()["error"]["message"]
    assert model.status_code == 404 and model.json()["error"]["code"] == "model_not_found"
    assert temperature.status_code == 400 and "temperature" in temperature.json()["error"]["message"]
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_client_that_disconnects_cancels_its_sequence(serving):
    async def main():
        async with serving(LONG, delay=0.01) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
            body = {"messages": [{"role": "user", "content": "count"}], "stream": True}
            async with http.stream("POST", "/v1/chat/completions", json=body) as response:
                seen = 0
                async for _ in response.aiter_lines():
                    seen += 1
                    if seen > 6:
                        break
            dropped = time.monotonic()
            while s.engine.answering() and time.monotonic() - dropped < 5:
                await asyncio.sleep(0.01)
            left = s.engine.answering()
            # the worker is free at once for the next request
            started = time.monotonic()
            quick = await http.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "again"}], "max_tokens": 3})
            return left, time.monotonic() - dropped, time.monotonic() - started, quick

    left, cancelled_after, next_took, quick = run(main())
    assert not left  # no answer still running
    assert cancelled_after < 2.0  # the whole answer would take 300 tokens x 10 ms
    assert quick.status_code == 200 and quick.json()["usage"]["completion_tokens"] == 3
    assert next_took < 2.0


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_blocking_request_whose_client_leaves_is_cancelled_too(serving):
    async def main():
        async with serving(LONG, delay=0.01) as s:
            async with httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=0.5) as http:
                with pytest.raises(httpx.ReadTimeout):
                    await http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "count"}]})
            gone = time.monotonic()
            while s.engine.answering() and time.monotonic() - gone < 5:
                await asyncio.sleep(0.01)
            return s.engine.answering(), time.monotonic() - gone, s.server.web.limiter.admitted

    left, took, admitted = run(main())
    assert not left and took < 2.0 and admitted == 0  # 300 tokens x 10 ms would take 3 s and more


def test_over_the_queue_limit_is_429_with_retry_after(serving):
    async def main():
        async with serving(LONG, delay=0.01, options=ServerOptions(max_queue=1)) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
            body = {"messages": [{"role": "user", "content": "count"}], "stream": True}
            async with http.stream("POST", "/v1/chat/completions", json=body) as response:
                async for _ in response.aiter_lines():
                    break
                busy = await http.post("/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "me too"}]})
                busy_conv = await http.post("/api/conversation", json={"content": "me too"})
            s.engine.chat.stop()
            await asyncio.sleep(0.2)
            after = await http.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "now?"}], "max_tokens": 2})
            return busy, busy_conv, after, await s.engine.conversations.list()

    busy, busy_conv, after, listed = run(main())
    for refused in (busy, busy_conv):
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["type"] == "rate_limit_exceeded"
        assert refused.headers["X-Request-Id"].startswith("req_")
    assert after.status_code == 200
    assert listed == []  # the refused conversation request made no chat


def test_response_format_constrains_the_answer_to_the_schema(serving):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

    async def main():
        async with serving('{"city": "Paris"}') as s:
            api = client(s)
            whole = await api.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "Where? Answer in JSON."}],
                response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}})
            async with httpx.AsyncClient(base_url=s.url, headers=s.headers) as http:
                bad = await http.post("/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}})
                raw = await http.post("/v1/completions", json={"prompt": "hi", "response_format": {"type": "json_object"}})
        async with serving("Paris is the answer.") as s:  # a model that would not write JSON
            forced = await client(s).chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "Where?"}], max_tokens=8,
                response_format={"type": "json_object"})
        return whole, bad, raw, forced

    whole, bad, raw, forced = run(main())
    text = forced.choices[0].message.content
    assert text.startswith("{") and not text.startswith("Paris")
    assert json.loads(whole.choices[0].message.content) == {"city": "Paris"}
    assert bad.status_code == 400 and "response_format" in bad.json()["error"]["message"]
    assert raw.status_code == 400 and "/v1/chat/completions" in raw.json()["error"]["message"]


def test_a_provider_that_cannot_be_reached_is_a_bad_gateway(serving):
    """A remote model's server failing was a 500 "model" error, as if Wren had failed."""
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    async def main():
        async with serving(ANSWER) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
            from wren.engine.inference.backends.remote import Transport

            s.engine.providers.remote_http_transport = httpx.MockTransport(refuse)
            s.engine.providers.remote_transport = Transport(retries=0)  # the answer's retries take seconds
            await s.engine.providers.add("dead", "http://127.0.0.1:9/v1", models=("m1",), discover=False)
            return await http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                 "model": "dead/m1"})

    r = run(main())
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_error" and "could not connect" in r.json()["error"]["message"]
