"""The adversarial run against `wren serve`, kept as a test: a battery of hostile and
broken requests on every route that reads a body, a path id or a header. Every one must
get a 4xx with OpenAI's error shape (never a 500, a hang or a dropped connection), and the
server must still answer afterwards. Run with -s for the figures."""

from __future__ import annotations

import asyncio

import httpx

from wren.engine.server.app import ServerOptions

JSON_ROUTES = ("/v1/chat/completions", "/v1/completions", "/api/conversation", "/api/conversation/prepare",
               "/api/tools/call_1/approve")
HUGE = str(2**80)

BODIES = {
    "lone surrogate, escaped": b'{"messages": [{"role": "user", "content": "\\ud800"}], "prompt": "\\ud800", '
                               b'"content": "\\ud800", "conversation_id": 1, "decision": "\\ud800"}',
    "lone surrogate, raw bytes": b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}], "prompt": "\xed\xa0\x80", '
                                 b'"content": "\xed\xa0\x80", "conversation_id": 1, "decision": "\xed\xa0\x80"}',
    "surrogate in a key": b'{"\\udfff": 1}',
    "100k nested arrays": b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "100k nested objects": b'{"x": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_000 + b"}",
    "200 nested objects": b'{"x": ' + b'{"a": ' * 200 + b"1" + b"}" * 200 + b"}",
    "5000-digit integer": b'{"max_tokens": ' + b"9" * 5000 + b"}",
    "negative 5000 digits": b'{"seed": -' + b"9" * 5000 + b"}",
    "2**80 conversation id": b'{"content": "hi", "conversation_id": ' + HUGE.encode() + b"}",
    "2**80 message id": b'{"action": "variant", "message_id": ' + HUGE.encode() + b"}",
    "NaN": b'{"temperature": NaN}',
    "Infinity": b'{"temperature": -Infinity}',
    "1e400": b'{"top_p": 1e400}',
    "not JSON": b"{nope",
    "invalid UTF-8": b'{"prompt": "\xff\xfe"}',
    "a list, not an object": b"[1, 2]",
    "empty body": b"",
    "wrong types": b'{"messages": "hi", "prompt": 3, "content": [], "conversation_id": "1", "decision": 1}',
    "over the body limit": b'{"prompt": "' + b"x" * (300 * 1024) + b'"}',
}
PATHS = [("GET", f"/api/conversation/{HUGE}"), ("GET", f"/api/conversation/{'9' * 5000}"),
         ("GET", f"/api/conversation/{HUGE}/stream?resume=x"), ("POST", f"/api/conversation/{HUGE}/stop"),
         ("GET", "/api/conversation/1/stream?resume=x&from=" + "9" * 5000),
         ("GET", "/api/conversation/0"), ("GET", "/v1/models/%ED%A0%80")]
HOSTS = ["evil.example.com", "localhost.evil.example.com", "127.0.0.1.nip.io", "[2001:db8::1]:80"]


def _clean(r: httpx.Response) -> bool:
    if not 400 <= r.status_code < 500:
        return False
    try:
        error = r.json()["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(error.get("message"), str) and bool(error["message"])


def test_every_hostile_request_gets_a_clean_4xx_and_the_server_keeps_answering(serving):
    async def main():
        results: list[tuple[str, int, bool]] = []
        async with (serving(options=ServerOptions(max_body=256 * 1024)) as s,
                    httpx.AsyncClient(base_url=s.url, headers={**s.headers, "Content-Type": "application/json"},
                                      timeout=30) as c):
            for route in JSON_ROUTES:
                for name, body in BODIES.items():
                    r = await c.post(route, content=body)
                    results.append((f"{route} {name}", r.status_code, _clean(r)))
            for method, path in PATHS:
                r = await c.request(method, path)
                results.append((f"{method} {path[:60]}", r.status_code, _clean(r)))
            for host in HOSTS:
                r = await c.get("/v1/models", headers={"Host": host})
                results.append((f"Host {host}", r.status_code, _clean(r)))
            alive = await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        return results, alive

    results, alive = run(main())
    bad = [(what, status) for what, status, clean in results if not clean]
    print(f"\nwren serve adversarial run: {len(results)} bad requests, {len(results) - len(bad)} answered cleanly")
    assert not bad, bad
    assert alive.status_code == 200


def run(coro):
    return asyncio.run(coro)


def test_a_client_that_leaves_while_its_body_comes_is_no_server_error(serving):
    """It was logged at ERROR with a traceback, as a failure of Wren's."""
    import logging

    from starlette.requests import ClientDisconnect, Request

    from wren.engine.logs import EVENTS

    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "wren_fields", {}).get("request_id") == "req-1":
                seen.append(record)

    async def main():
        async with serving() as s:
            request = Request({"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [],
                               "state": {"request_id": "req-1"}})
            return await s.server.web._on_error(request, ClientDisconnect())

    keep, level = Keep(), EVENTS.level
    EVENTS.addHandler(keep)
    EVENTS.setLevel(logging.INFO)
    try:
        response = run(main())
    finally:
        EVENTS.removeHandler(keep)
        EVENTS.setLevel(level)
    assert response.status_code == 499
    assert [(r.getMessage(), r.levelno) for r in seen] == [("server.client_gone", logging.INFO)]
