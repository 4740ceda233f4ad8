"""Token probabilities on the OpenAI endpoints (blocking and streamed, OpenAI's shapes) and
continuing an answer through `POST /api/conversation` with action continue."""

from __future__ import annotations

import asyncio
import math

import httpx
import openai

from tests.engine.server.test_server_conversation import answer_text, parse
from tests.fixtures.hash_model import HashBackend
from wren.engine.events import Delta

QUESTION = [{"role": "user", "content": "Capital of France?"}]
ANSWER = "The capital of France is Paris. 🥐"


def run(coro):
    return asyncio.run(coro)


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key, max_retries=0, timeout=30)


def check_content(items, k: int) -> None:
    for item in items:
        assert item.bytes == list(item.token.encode("utf-8"))
        assert 0.0 <= math.exp(item.logprob) <= 1.0
        tops = [t.logprob for t in item.top_logprobs]
        assert len(tops) == k and tops == sorted(tops, reverse=True)
        assert all(t.bytes == list(t.token.encode("utf-8")) for t in item.top_logprobs)
        assert item.logprob <= tops[0] + 1e-12


def test_chat_completions_give_each_tokens_probability_blocking_and_streamed(serving):
    async def main():
        async with serving(backend=HashBackend()) as s:
            api = client(s)
            whole = await api.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=16, seed=4,
                                                      temperature=1.0, logprobs=True, top_logprobs=3)
            stream = await api.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=16, seed=4,
                                                       temperature=1.0, logprobs=True, top_logprobs=3, stream=True)
            chunks = [c async for c in stream]
            same = (await s.engine.settings.default_sampling("tiny")).with_(temperature=1.0, seed=4, max_tokens=16, logprobs=3)
            direct = [e async for e in s.server.web.answers.stateless_chat(QUESTION, same)]
            plain = await api.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=4)
            return whole, chunks, direct, plain

    whole, chunks, direct, plain = run(main())
    choice = whole.choices[0]
    items = choice.logprobs.content
    check_content(items, 3)
    assert "".join(i.token for i in items) == choice.message.content
    # the numbers are the engine's own
    entries = [entry for e in direct if isinstance(e, Delta) for entry in e.logprobs]
    assert [(i.token, i.logprob) for i in items] == [(e.token, e.logprob) for e in entries]
    assert [[t.logprob for t in i.top_logprobs] for i in items] == [[t.logprob for t in e.top] for e in entries]
    # streamed: each chunk carries its own tokens, and together they are the blocking answer's
    texts = [c for c in chunks if c.choices and c.choices[0].delta.content]
    for c in texts:
        assert "".join(i.token for i in c.choices[0].logprobs.content) == c.choices[0].delta.content
    assert [i.model_dump() for c in texts for i in c.choices[0].logprobs.content] == [i.model_dump() for i in items]
    assert plain.choices[0].logprobs is None  # not asked for


def test_text_completions_give_the_legacy_logprobs_shape(serving):
    async def main():
        async with serving(ANSWER) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
            prompt = s.engine.loaded_worker.tokenizer.render_chat(QUESTION)
            whole = await http.post("/v1/completions", json={"prompt": prompt, "logprobs": 2, "max_tokens": 40})
            async with http.stream("POST", "/v1/completions",
                                   json={"prompt": prompt, "logprobs": 2, "stream": True}) as r:
                raw = b"".join([chunk async for chunk in r.aiter_raw()])
            return whole, raw

    whole, raw = run(main())
    assert whole.status_code == 200, whole.text
    choice = whole.json()["choices"][0]
    lp = choice["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert "".join(lp["tokens"]) == choice["text"] == ANSWER
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert top[token] == logprob and 0.0 <= math.exp(logprob) <= 1.0
        # the scripted model puts all mass on its next token: the chosen one is certain
        assert logprob == 0.0 and max(top.values()) == 0.0
    chunks = [e["data"] for e in parse(raw) if e["data"] != "[DONE]"]
    streamed = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["text"]]
    assert [t for c in streamed for t in c["logprobs"]["tokens"]] == lp["tokens"]
    assert [o for c in streamed for o in c["logprobs"]["text_offset"]] == lp["text_offset"]


def test_bad_logprobs_fields_are_refused_naming_the_field(serving):
    async def main():
        async with serving(ANSWER) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
            chat = [await http.post("/v1/chat/completions", json={"messages": QUESTION, **extra}) for extra in (
                {"logprobs": True, "top_logprobs": 21},
                {"top_logprobs": 2},
                {"logprobs": "yes"},
            )]
            text = await http.post("/v1/completions", json={"prompt": "Hi", "logprobs": -1})
            return chat, text

    (too_many, without, not_bool), text = run(main())
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "top_logprobs"
    assert "from 0 to 20" in too_many.json()["error"]["message"]
    assert without.status_code == 400 and "needs logprobs: true" in without.json()["error"]["message"]
    assert not_bool.status_code == 400 and not_bool.json()["error"]["param"] == "logprobs"
    assert text.status_code == 400 and text.json()["error"]["param"] == "logprobs"


# -- continue ----------------------------------------------------------------------------------


def test_continue_streams_the_rest_of_an_answer_into_the_same_message(serving):
    async def main():
        async with serving(backend=HashBackend()) as s:
            conv = await s.engine.conversations.create("Go on")
            async with httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
                first = await http.post("/api/conversation", json={
                    "conversation_id": conv.id, "content": "Capital of France?",
                    "sampling": {"temperature": 0, "max_tokens": 4}})
                cut = (await s.engine.conversations.messages(conv.id))[-1]
                more = await http.post("/api/conversation", json={"action": "continue", "message_id": cut.id})
                stored = await s.engine.conversations.messages(conv.id)
                errors = [await http.post("/api/conversation", json=body) for body in (
                    {"action": "continue"},
                    {"action": "continue", "message_id": cut.id, "content": "more"},
                    {"action": "continue", "message_id": stored[0].id},  # the question
                )]
            return first, cut, more, stored, errors

    first, cut, more, stored, (missing, content, question) = run(main())
    assert first.status_code == 200 and more.status_code == 200
    assert cut.content and cut.completion_tokens == 4  # cut at its length limit
    events = parse(more.content)
    token = events[1]["data"]
    assert token["type"] == "resume_conversation_token" and token["message_id"] == cut.id
    assert events[2]["data"]["p"] == "/message/content/parts/0" and events[2]["data"]["o"] == "append"
    added = answer_text(events)  # the stream appends to the text there is
    assert added and stored[-1].content == cut.content + added
    patch = next(e["data"] for e in events if e["event"] == "delta" and e["data"].get("o") == "patch")
    assert {"p": "/message/status", "o": "replace", "v": "finished_successfully"} in patch["v"]
    meta = next(op["v"] for op in patch["v"] if op["p"] == "/message/metadata")
    assert meta["message_id"] == cut.id and meta["usage"]["cached_tokens"] > 0
    assert len(stored) == 2 and stored[-1].id == cut.id
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "message_id"
    assert content.status_code == 400 and content.json()["error"]["param"] == "content"
    assert question.status_code == 400 and "not an answer" in question.json()["error"]["message"]
