"""`wren serve` with a thinking model (scripted backend, real Qwen3 and gpt-oss templates),
through the official `openai` client: the thinking streams as reasoning_content deltas and
comes whole as message.reasoning_content, never in content; usage counts its tokens in
completion_tokens_details.reasoning_tokens; reasoning_effort and
chat_template_kwargs.enable_thinking reach the template."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import openai

from .conftest import GPT_OSS, QWEN3

REPLY = "<think>\nThe user wants a capital.\n</think>\n\nParis."
QUESTION = [{"role": "user", "content": "Capital of France?"}]


@contextlib.asynccontextmanager
async def served(thinking_engine, server_keys, reply=REPLY, template=QWEN3, arch="qwen3"):
    from wren.engine.server.app import WrenServer

    engine = thinking_engine(reply, template, arch)
    key, _ = server_keys.create()
    await engine.models.load()
    server = WrenServer(engine, key, port=0)
    port = await server.start()
    try:
        yield engine, openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0,
                                         timeout=30), (f"http://127.0.0.1:{port}", key)
    finally:
        await server.stop()
        await engine.close()


def test_streamed_reasoning_content_deltas_then_content(thinking_engine, server_keys):
    async def main():
        async with served(thinking_engine, server_keys) as (_, api, _where):
            stream = await api.chat.completions.create(model="tiny", messages=QUESTION, stream=True,
                                                       stream_options={"include_usage": True})
            return [chunk async for chunk in stream]

    chunks = asyncio.run(main())
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    thinking = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    content = "".join(d.content or "" for d in deltas)
    assert thinking == "The user wants a capital.\n" and content == "Paris."
    last_thinking = max(i for i, d in enumerate(deltas) if getattr(d, "reasoning_content", None))
    first_content = min(i for i, d in enumerate(deltas) if d.content)
    assert last_thinking < first_content
    usage = chunks[-1].usage
    assert 0 < usage.completion_tokens_details.reasoning_tokens < usage.completion_tokens


def test_whole_answer_has_message_reasoning_content(thinking_engine, server_keys):
    async def main():
        async with served(thinking_engine, server_keys) as (_, api, _where):
            return await api.chat.completions.create(model="tiny", messages=QUESTION)

    done = asyncio.run(main())
    message = done.choices[0].message
    assert message.content == "Paris."
    assert message.reasoning_content == "The user wants a capital.\n"
    assert done.usage.completion_tokens_details.reasoning_tokens > 0


def test_enable_thinking_false_reaches_the_qwen3_template(thinking_engine, server_keys):
    async def main():
        async with served(thinking_engine, server_keys, reply="Paris.") as (engine, api, _where):
            answer = await api.chat.completions.create(
                model="tiny", messages=QUESTION, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
            return engine.scripted.loaded[0].prompts[-1], answer

    prompt, answer = asyncio.run(main())
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert answer.choices[0].message.content == "Paris."
    assert getattr(answer.choices[0].message, "reasoning_content", None) is None


def test_reasoning_effort_reaches_the_gpt_oss_template_and_a_bad_one_is_refused(thinking_engine, server_keys):
    reply = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Paris."

    async def main():
        async with served(thinking_engine, server_keys, reply=reply, template=GPT_OSS,
                          arch="qwen2") as (engine, api, (url, key)):
            answer = await api.chat.completions.create(model="tiny", messages=QUESTION, reasoning_effort="high")
            prompt = engine.scripted.loaded[0].prompts[-1]
            async with httpx.AsyncClient() as http:
                bad = await http.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                                      json={"model": "tiny", "messages": QUESTION, "reasoning_effort": "extreme"})
        return prompt, answer, bad

    prompt, answer, bad = asyncio.run(main())
    assert "Reasoning: high\n" in prompt and prompt.endswith("<|start|>assistant")
    assert answer.choices[0].message.content == "Paris."
    assert answer.choices[0].message.reasoning_content == "Easy."
    assert bad.status_code == 400 and "reasoning_effort must be one of" in bad.json()["error"]["message"]


def test_the_conversation_endpoint_sends_thinking_as_typed_reasoning_events(thinking_engine, server_keys):
    from tests.engine.server.test_server_conversation import answer_text, parse

    async def main():
        async with served(thinking_engine, server_keys) as (engine, _api, (url, key)):
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http, \
                    http.stream("POST", "/api/conversation", json={"content": "Capital of France?"}) as r:
                raw = b"".join([chunk async for chunk in r.aiter_raw()])
            conversations = await engine.conversations.list()
            stored = await engine.conversations.messages(conversations[0].id)
            return parse(raw), stored

    events, stored = asyncio.run(main())
    typed = [e["data"] for e in events if isinstance(e["data"], dict) and e["data"].get("type") == "reasoning"]
    assert "".join(t["text"] for t in typed) == "The user wants a capital.\n"
    assert answer_text(events) == "Paris."
    assert stored[-1].content == "Paris." and stored[-1].reasoning == "The user wants a capital."
