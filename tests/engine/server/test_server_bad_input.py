"""Hostile or broken request bodies and ids get a 400 naming the field, never a 500: lone
surrogates (as a JSON escape and as raw bytes), deep nesting, huge integers, non-finite
numbers, and ids beyond SQLite's 64-bit integers, on every route that parses JSON or an id.
Real server (uvicorn on a free port) over the scripted backend."""

from __future__ import annotations

import asyncio

import httpx
import pytest

HUGE = 2**80
ROUTES = ("/v1/chat/completions", "/v1/completions", "/api/conversation", "/api/conversation/prepare",
          "/api/tools/call_1/approve")


def run(coro):
    return asyncio.run(coro)


async def _post(s, path: str, raw: bytes) -> httpx.Response:
    async with httpx.AsyncClient(base_url=s.url, headers={**s.headers, "Content-Type": "application/json"},
                                 timeout=30) as c:
        return await c.post(path, content=raw)


def _error(r: httpx.Response) -> dict:
    assert r.status_code == 400, (r.status_code, r.text[:300])
    return r.json()["error"]


def test_a_lone_surrogate_is_a_400_naming_the_field_as_escape_or_raw_bytes(serving):
    escaped = b'{"messages": [{"role": "user", "content": "hi \\ud800 there"}]}'
    raw = b'{"messages": [{"role": "user", "content": "hi \xed\xa0\x80 there"}]}'
    in_key = b'{"messages": [{"role": "user", "content": "hi"}], "\\udc00": 1}'

    async def main():
        async with serving() as s:
            return [await _post(s, "/v1/chat/completions", body) for body in (escaped, raw, in_key)] + [
                await _post(s, "/v1/completions", b'{"prompt": "a \\udfff b"}'),
                await _post(s, "/api/conversation", b'{"content": "x \\ud83d"}'),
                await _post(s, "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "ok \\ud83d\\ude00"}]}'),
            ]

    *bad, fine = run(main())
    params = [_error(r)["param"] for r in bad]
    assert params[:2] == ["messages[0].content", "messages[0].content"]
    assert params[2] == "\\udc00" and params[3:] == ["prompt", "content"]
    assert "surrogate" in _error(bad[0])["message"]
    assert fine.status_code == 200  # a real pair of surrogates is an ordinary emoji


def test_deep_nesting_huge_integers_and_non_finite_numbers_are_400s_on_every_json_route(serving):
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    shallow_but_deep = b'{"tools": ' + b'{"a": ' * 200 + b"1" + b"}" * 200 + b"}"
    digits = b'{"max_tokens": ' + b"9" * 5000 + b"}"
    negative = b'{"seed": -' + b"7" * 5000 + b"}"
    nan = b'{"temperature": NaN}'
    inf = b'{"temperature": 1e400}'

    async def main():
        async with serving() as s:
            out = {}
            for path in ROUTES:
                out[path] = [await _post(s, path, body) for body in (deep, shallow_but_deep, digits, negative, nan, inf)]
            return out

    for path, answers in run(main()).items():
        errors = [_error(r) for r in answers]
        assert "nested" in errors[0]["message"], (path, errors[0])
        assert errors[1]["param"].startswith("tools"), (path, errors[1])
        assert errors[2]["param"] == "max_tokens" and "digits" in errors[2]["message"], (path, errors[2])
        assert errors[3]["param"] == "seed", (path, errors[3])
        assert errors[4]["param"] == "temperature" and errors[5]["param"] == "temperature", (path, errors[4:])


def test_ids_beyond_64_bits_are_400s_on_post_and_get(serving):
    async def main():
        async with serving() as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as c:
            return [
                await c.post("/api/conversation", json={"content": "hi", "conversation_id": HUGE}),
                await c.post("/api/conversation", json={"action": "variant", "message_id": HUGE}),
                await c.post("/api/conversation", json={"action": "edit", "message_id": 2**63, "content": "x"}),
                await c.post("/api/conversation/prepare", json={"conversation_id": HUGE, "content": "x"}),
                await c.get(f"/api/conversation/{HUGE}"),
                await c.get(f"/api/conversation/{'9' * 5000}"),
                await c.get(f"/api/conversation/{HUGE}/stream", params={"resume": "t"}),
                await c.post(f"/api/conversation/{HUGE}/stop"),
                await c.get("/api/conversation/1/stream", params={"resume": "t", "from": "9" * 5000}),
                await c.get(f"/api/conversation/{2**63 - 1}"),  # the largest id: a plain 404
            ]

    *bad, largest = run(main())
    params = [_error(r)["param"] for r in bad]
    assert params == ["conversation_id", "message_id", "message_id", "conversation_id", "id", "id", "id", "id",
                      "from"]
    assert "64-bit" in _error(bad[4])["message"]
    assert largest.status_code == 404


@pytest.mark.parametrize("arguments", ["[" * 100_000, '{"n": ' + "1" * 5000 + "}"])
def test_tool_call_arguments_that_cannot_be_read_are_a_400(serving, arguments):
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]

    async def main():
        async with serving() as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as c:
            return await c.post("/v1/chat/completions", json={"messages": messages})

    assert _error(run(main()))["param"] == "messages[1].tool_calls[0].function.arguments"


def test_a_sampling_setting_out_of_range_names_its_field(serving):
    """Every other bad field was named in the error's param; sampling's said null."""
    async def main():
        async with serving() as s:
            return [await _post(s, "/v1/chat/completions",
                                b'{"messages": [{"role": "user", "content": "hi"}], ' + field + b"}")
                    for field in (b'"temperature": 9', b'"top_p": 0', b'"max_tokens": 10000000')]

    errors = [_error(r) for r in run(main())]
    assert [e["param"] for e in errors] == ["temperature", "top_p", "max_tokens"]
    assert "temperature must be between 0 and 5" in errors[0]["message"]
