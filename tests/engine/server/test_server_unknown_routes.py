"""An unknown path (404) or a method a path does not answer (405) gets the same JSON error
body as every other error of `wren serve` ({"error": {message, type, param, code}}), never
Starlette's plain text; a 405 still names the methods in Allow. Real server (uvicorn on a
free port) over the scripted backend."""

from __future__ import annotations

import asyncio

import httpx

ERROR_KEYS = {"message", "type", "param", "code"}


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["content-type"] == "application/json", r.headers
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    return body["error"]


def test_unknown_paths_and_wrong_methods_are_json_errors(serving):
    async def main():
        async with serving() as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as c:
            unknown = [await c.get("/"), await c.get("/v1/nothing"), await c.post("/v2/chat/completions", json={}),
                       await c.get("/api/conversation/not-a-number")]
            wrong = [await c.get("/v1/chat/completions"), await c.delete("/v1/models"),
                     await c.put("/api/conversation/1/stop"), await c.post("/v1/models/some-model")]
            known = await c.get("/v1/models")
            return unknown, wrong, known

    unknown, wrong, known = asyncio.run(main())
    for r, path in zip(unknown, ("/", "/v1/nothing", "/v2/chat/completions", "/api/conversation/not-a-number")):
        error = _error(r, 404)
        assert error["type"] == "invalid_request_error" and error["code"] == "not_found", error
        assert path in error["message"], error
        assert r.headers["x-request-id"].startswith("req_")
    for r, allowed in zip(wrong, ("POST", "GET, HEAD", "POST", "GET, HEAD")):
        error = _error(r, 405)
        assert error["type"] == "invalid_request_error" and error["code"] == "method_not_allowed", error
        assert r.headers["allow"] == allowed, r.headers
        assert r.request.method in error["message"] and allowed in error["message"], error
    assert known.status_code == 200  # the routes themselves are untouched


def test_an_unknown_path_without_the_key_is_still_a_401(serving):
    # the key is checked before the path: an unknown path tells a caller without it nothing
    async def main():
        async with serving() as s, httpx.AsyncClient(base_url=s.url, timeout=30) as c:
            return await c.get("/v1/nothing")

    error = _error(asyncio.run(main()), 401)
    assert error["code"] == "invalid_api_key"
