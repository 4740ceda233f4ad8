"""Wren's own conversation endpoint: the v1 delta encoding (golden bytes), titles, resuming
a dropped stream exactly once, prepare, stop and errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from wren.engine.server.app import ServerOptions
from wren.engine.server.streams import APPEND_PATH

GOLDEN = Path(__file__).with_name("data") / "conversation_v1.sse"
ANSWER = "The capital of France is Paris. 🥐"
LONG = " ".join(f"w{i}" for i in range(60))


def run(coro):
    return asyncio.run(coro)


def reply(prompt: str) -> str:
    """The title request gets a title; everything else the answer."""
    return "Capital Cities" if "Write a title" in prompt else ANSWER


def parse(raw: bytes) -> list[dict]:
    """SSE events as {"id", "event", "data"} dicts (data parsed as JSON where it is)."""
    events = []
    for block in raw.decode("utf-8").split("\n\n"):
        if not block:
            continue
        event: dict = {"id": None, "event": None}
        for line in block.split("\n"):
            name, _, value = line.partition(": ")
            event[name] = value
        data = event.get("data")
        event["data"] = data if data == "[DONE]" else json.loads(data)
        events.append(event)
    return events


def answer_text(events: list[dict]) -> str:
    """Apply the v1 delta encoding: an op with p/o sets the path and operation that bare
    {"v"} chunks repeat."""
    text, path, op = "", None, None
    for event in events:
        data = event["data"]
        if event["event"] != "delta":
            continue
        if "p" in data:
            path, op = data["p"], data["o"]
        if path == APPEND_PATH and op == "append":
            text += data["v"]
    return text


def test_the_stream_matches_the_v1_delta_encoding_byte_for_byte(serving):
    async def main():
        options = ServerOptions(make_token=lambda: "RESUME-TOKEN")
        async with serving(ANSWER, options=options) as s:
            conv = await s.engine.conversations.create("Golden")
            body = {"conversation_id": conv.id, "content": "Capital of France?"}
            async with httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http, \
                    http.stream("POST", "/api/conversation", json=body) as r:
                raw = b"".join([chunk async for chunk in r.aiter_raw()])
                return r, raw, await s.engine.conversations.messages(conv.id)

    response, raw, stored = run(main())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert raw == GOLDEN.read_bytes()
    # and what the bytes say, in words:
    events = parse(raw)
    assert events[0] == {"id": None, "event": "delta_encoding", "data": "v1"}
    assert events[1]["data"]["type"] == "resume_conversation_token"
    assert events[2]["data"] == {"p": APPEND_PATH, "o": "append", "v": "The"}
    assert all(set(e["data"]) == {"v"} for e in events[3:-3])
    patch = events[-3]["data"]
    assert patch["o"] == "patch" and {"p": "/message/status", "o": "replace", "v": "finished_successfully"} in patch["v"]
    assert events[-1]["data"] == "[DONE]"
    assert [e["id"] for e in events[2:-1]] == [str(n) for n in range(1, len(events) - 2)]
    assert answer_text(events) == ANSWER == stored[-1].content


def test_a_new_conversation_gets_a_title_event_and_keeps_the_title(serving):
    async def main():
        async with serving(reply) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
            async with http.stream("POST", "/api/conversation", json={"content": "Capital of France?"}) as r:
                raw = b"".join([chunk async for chunk in r.aiter_raw()])
            events = parse(raw)
            conv_id = events[1]["data"]["conversation_id"]
            shown = await http.get(f"/api/conversation/{conv_id}")
            return events, shown.json(), await s.engine.conversations.list()

    events, shown, listed = run(main())
    titles = [e["data"] for e in events if isinstance(e["data"], dict) and e["data"].get("type") == "title_generation"]
    assert titles == [{"type": "title_generation", "title": "Capital Cities", "conversation_id": shown["id"]}]
    kinds = [e["data"]["type"] if "type" in e["data"] else e["event"] for e in events if isinstance(e["data"], dict)]
    assert kinds.index("title_generation") < kinds.index("message_stream_complete")
    assert answer_text(events) == ANSWER
    assert shown["title"] == "Capital Cities" and [c.title for c in listed] == ["Capital Cities"]
    assert [(m["role"], m["content"], m["status"]) for m in shown["messages"]] == [
        ("user", "Capital of France?", "complete"), ("assistant", ANSWER, "complete")]


def test_resume_after_a_drop_gives_the_whole_answer_exactly_once(serving):
    async def main():
        async with serving(LONG, delay=0.003) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
            first: list[bytes] = []
            async with http.stream("POST", "/api/conversation", json={"content": "Count for me"}) as r:
                async for line in r.aiter_lines():
                    first.append(line)
                    if line.startswith("id: 5"):
                        break  # got the id line of chunk 5; its data never arrives
            head = parse(("\n".join(first[:4]) + "\n\n").encode())
            token = head[1]["data"]["token"]
            conv_id = head[1]["data"]["conversation_id"]
            before = parse(("\n".join(first[:-1]) + "\n").encode())  # chunks 1..4, complete
            last = int(before[-1]["id"])
            await asyncio.sleep(0.1)  # the answer goes on without a listener
            async with http.stream("GET", f"/api/conversation/{conv_id}/stream",
                                   params={"resume": token, "from": last}) as again:
                rest = parse(b"".join([chunk async for chunk in again.aiter_raw()]))
            stored = (await http.get(f"/api/conversation/{conv_id}")).json()["messages"][-1]
            wrong = await http.get(f"/api/conversation/{conv_id}/stream", params={"resume": "nope", "from": 0})
            missing = await http.get(f"/api/conversation/{conv_id}/stream")
            beyond = await http.get(f"/api/conversation/{conv_id}/stream", params={"resume": token, "from": 10**6})
            negative = await http.get(f"/api/conversation/{conv_id}/stream", params={"resume": token, "from": -5})
            assert negative.status_code == 400
            assert negative.json()["error"]["message"] == "from must be a chunk number from 0 on, got -5"
            return last, before, rest, stored, wrong, missing, beyond

    last, before, rest, stored, wrong, missing, beyond = run(main())
    assert last == 4
    assert rest[0]["event"] == "delta_encoding" and rest[1]["data"]["type"] == "resume_conversation_token"
    numbered = before[2:] + rest[2:-1]
    assert [int(e["id"]) for e in numbered] == list(range(1, len(numbered) + 1))  # each chunk once, in order
    assert rest[-1]["data"] == "[DONE]"
    joined = answer_text(before[2:] + rest[2:])
    assert joined == LONG
    assert stored["content"] == LONG and stored["status"] == "complete"
    assert wrong.status_code == 404 and missing.status_code == 400 and beyond.status_code == 400


def test_last_event_id_resumes_too_and_a_dropped_answer_keeps_generating(serving):
    async def main():
        async with serving(LONG, delay=0.003) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
            async with http.stream("POST", "/api/conversation", json={"content": "Count"}) as r:
                lines = []
                async for line in r.aiter_lines():
                    lines.append(line)
                    if len(lines) == 4:
                        break
            token_event = json.loads(lines[3].removeprefix("data: "))
            conv_id = token_event["conversation_id"]
            while s.server.web.tasks:  # nobody listens; it still runs to the end
                await asyncio.sleep(0.02)
            stored = await s.engine.conversations.messages(conv_id)
            async with http.stream("GET", f"/api/conversation/{conv_id}/stream",
                                   params={"resume": token_event["token"]},
                                   headers={"Last-Event-ID": "0"}) as again:
                everything = parse(b"".join([chunk async for chunk in again.aiter_raw()]))
            return stored, everything

    stored, everything = run(main())
    assert stored[-1].content == LONG and stored[-1].status.value == "complete"
    assert answer_text(everything) == LONG and everything[-1]["data"] == "[DONE]"


def test_prepare_warms_a_draft_and_stop_ends_an_answer(serving):
    async def main():
        async with serving(LONG, delay=0.01) as s:
            conv = await s.engine.conversations.create("Drafts")
            async with httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
                warmed = await http.post("/api/conversation/prepare", json={
                    "conversation_id": conv.id, "content": "What is the capital of France?", "wait": True})
                no_conv = await http.post("/api/conversation/prepare", json={"content": "hi"})
                async with http.stream("POST", "/api/conversation",
                                       json={"conversation_id": conv.id, "content": "What is the capital of France?"}) as r:
                    raw = b""
                    async for chunk in r.aiter_raw():
                        raw += chunk
                        if raw.count(b"event: delta\n") == 3:
                            stopped = await http.post(f"/api/conversation/{conv.id}/stop")
                events = parse(raw)
                return warmed, no_conv, stopped, events, await s.engine.conversations.messages(conv.id)

    warmed, no_conv, stopped, events, stored = run(main())
    assert warmed.status_code == 200 and warmed.json()["prompt_tokens"] > 5
    assert warmed.json()["cached_tokens"] == warmed.json()["prompt_tokens"]
    assert no_conv.status_code == 400 and "conversation_id" in no_conv.json()["error"]["message"]
    assert stopped.status_code == 200
    patch = next(e["data"] for e in events if e["event"] == "delta" and e["data"].get("o") == "patch")
    assert {"p": "/message/status", "o": "replace", "v": "finished_partial_completion"} in patch["v"]
    text = answer_text(events)
    assert text and LONG.startswith(text) and text != LONG
    assert stored[-1].content == text and stored[-1].status.value == "stopped"
    assert usage_metadata(events)["prompt_tokens"] > 5  # the prompt of the answer that was warmed


def usage_metadata(events: list[dict]) -> dict:
    patch = next(e["data"] for e in events if e["event"] == "delta" and e["data"].get("o") == "patch")
    return next(op["v"] for op in patch["v"] if op["p"] == "/message/metadata")["usage"]


def test_conversation_errors_are_http_errors_before_the_stream(serving):
    async def main():
        async with serving(ANSWER, context_length=64) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
            results = [await http.post("/api/conversation", json=body) for body in (
                {},
                {"content": "   "},
                {"conversation_id": 999, "content": "hi"},
                {"content": LONG * 3},
                {"content": "hi", "action": "dance"},
                {"content": "hi", "tools": ["web_search"], "tool_choice": "auto"},
            )]
            return results, await s.engine.conversations.list()

    (missing, empty, unknown, too_long, action, tools), listed = run(main())
    assert missing.status_code == 400 and "content" in missing.json()["error"]["message"]
    assert empty.status_code == 400 and "empty" in empty.json()["error"]["message"]
    assert unknown.status_code == 404
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
    assert action.status_code == 400 and "dance" in action.json()["error"]["message"]
    from wren.engine.server.wire import engine_supports

    if engine_supports("tools"):
        assert tools.status_code == 400 and "web_search" in tools.json()["error"]["message"], tools.text
    else:
        assert tools.status_code == 400 and "not supported yet" in tools.json()["error"]["message"]
    assert listed == []  # failed requests leave no empty chats behind


def test_a_temporary_conversation_streams_and_stays_out_of_the_list(serving):
    async def main():
        async with serving(reply) as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
            streams = []
            for _ in range(2):
                async with http.stream("POST", "/api/conversation",
                                       json={"content": "Capital of France?", "temporary": True}) as r:
                    streams.append(parse(b"".join([chunk async for chunk in r.aiter_raw()])))
            return streams, await s.engine.conversations.list()

    streams, listed = run(main())
    for events in streams:
        assert answer_text(events) == ANSWER and events[-1]["data"] == "[DONE]"
    assert len({events[1]["data"]["conversation_id"] for events in streams}) == 2
    assert listed == []


def test_a_blocked_word_stops_both_endpoints_before_anything_is_sent(serving):
    async def main():
        async with serving("You asked about pineapple pizza.") as s:
            await s.engine.safety.set_blocklist(["pineapple"], [])
            async with httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as http:
                conv = await http.post("/api/conversation", json={"content": "I love pineapple"})
                chat = await http.post("/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "I love pineapple"}]})
                answer = await http.post("/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "What do I like?"}]})
            return conv, chat, answer, await s.engine.conversations.list(), s.engine.scripted.loaded[0].prompts

    conv, chat, answer, listed, prompts = run(main())
    assert conv.status_code == 400 and conv.json()["error"]["code"] == "content_blocked"
    assert conv.json()["error"]["safety"][0]["category"] == "user.blocklist"
    assert chat.status_code == 200 and chat.json()["choices"][0]["finish_reason"] == "content_filter"
    assert chat.json()["choices"][0]["message"]["content"] == ""
    # the model's own answer with the word is stopped on the way out
    assert answer.json()["choices"][0]["finish_reason"] == "content_filter"
    assert "pineapple" not in answer.json()["choices"][0]["message"]["content"]
    assert listed == [] and not any("pineapple" in p for p in prompts)
