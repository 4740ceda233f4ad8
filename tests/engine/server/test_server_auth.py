"""The server's key: 401 without it or with a wrong one; kept in a real keyring backend and
nowhere under the data folder; request ids in responses and logs, never prompts or answers;
loopback unless asked; CORS off unless asked."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest

from wren.engine.errors import InvalidRequest
from wren.engine.server import keys
from wren.engine.server.app import ServerOptions
from wren.engine.server.hosts import is_loopback

QUESTION = "What is the capital of Atlantis-7Q?"
ANSWER = "Atlantis-7Q has no capital, it sank."


def run(coro):
    return asyncio.run(coro)


ENDPOINTS = [
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}]}),
    ("POST", "/v1/completions", {"prompt": QUESTION, "max_tokens": 2}),
    ("POST", "/api/conversation", {"content": QUESTION}),
    ("POST", "/api/conversation/prepare", {"conversation_id": 1, "content": "draft"}),
    ("GET", "/api/conversation/1", None),
    ("GET", "/api/conversation/1/stream?resume=x&from=0", None),
    ("POST", "/api/conversation/1/stop", None),
    ("GET", "/nowhere", None),
]


def test_every_endpoint_needs_the_right_key(serving, wren_home: Path, server_keys):
    from wren.engine.logs import close_logging, setup_logging

    setup_logging()

    async def main():
        async with serving(ANSWER) as s, httpx.AsyncClient(base_url=s.url, timeout=30) as http:
            refused = []
            for method, path, body in ENDPOINTS:
                for headers in ({}, {"Authorization": "Bearer wren-not-the-key"},
                                {"Authorization": s.key}, {"Authorization": f"Basic {s.key}"},
                                {"Authorization": f"Bearer {s.key}x"}):
                    refused.append(await http.request(method, path, json=body, headers=headers))
            ok = await http.get("/v1/models", headers=s.headers)
            chat = await http.post("/v1/chat/completions", headers=s.headers, json=ENDPOINTS[1][2])
            async with http.stream("POST", "/api/conversation", headers=s.headers, json=ENDPOINTS[3][2]) as r:
                streamed = b"".join([c async for c in r.aiter_raw()])
            return s.key, refused, ok, chat, streamed, await s.engine.conversations.list()

    try:
        key, refused, ok, chat, streamed, listed = run(main())
    finally:
        close_logging()
    assert all(r.status_code == 401 for r in refused), [(r.request.url.path, r.status_code) for r in refused]
    assert all(r.json()["error"]["code"] == "invalid_api_key" for r in refused)
    assert all(r.headers["WWW-Authenticate"].startswith("Bearer") for r in refused)
    assert listed and len(listed) == 1  # only the authorized conversation request made a chat
    assert ok.status_code == 200 and chat.status_code == 200 and ANSWER.split()[0] in streamed.decode()
    ids = [r.headers["X-Request-Id"] for r in refused + [ok, chat]]
    assert len(set(ids)) == len(ids) and all(i.startswith("req_") for i in ids)
    assert chat.json()["id"] == "chatcmpl-" + chat.headers["X-Request-Id"].removeprefix("req_")

    # The key is in the keyring (an encrypted file outside the data folder), not in plain text
    # anywhere: not in that file, and nowhere under the data folder (database, logs, models).
    assert server_keys.get() == key
    key_file = Path(server_keys._backend.file_path)
    assert key_file.exists() and wren_home not in key_file.parents
    assert key.encode() not in key_file.read_bytes()
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    files = [p for p in wren_home.rglob("*") if p.is_file()]
    assert any(p.suffix == ".sqlite3" for p in files) and any("log" in p.name for p in files)
    for path in files:
        data = path.read_bytes()
        assert key.encode() not in data, f"the server key is in {path}"
        assert key[len(keys.KEY_PREFIX):].encode() not in data, f"the server key is in {path}"

    # Logs hold request ids and statuses, never the prompt or the answer.
    logs = b"".join(p.read_bytes() for p in files if "log" in p.name)
    assert b"server.request" in logs and ids[-1].encode() in logs and b'"status": 401' in logs
    assert QUESTION.encode() not in logs and b"sank" not in logs


def test_the_encrypted_key_file_needs_its_passphrase(tmp_path: Path):
    path = tmp_path / "keys" / "server.cfg"
    store = keys.open_keys(key_file=path, environ={keys.ENV_PASSPHRASE: "first passphrase"})
    key, made = store.create()
    again, made_again = keys.open_keys(key_file=path, environ={keys.ENV_PASSPHRASE: "first passphrase"}).create()
    assert made and not made_again and again == key and key.startswith(keys.KEY_PREFIX)
    with pytest.raises(keys.KeyStoreUnavailable, match="passphrase does not open"):
        keys.open_keys(key_file=path, environ={keys.ENV_PASSPHRASE: "wrong"}).get()
    # an existing file is used even without the flag; without a passphrase it says how to give one
    with pytest.raises(keys.KeyStoreUnavailable, match=keys.ENV_PASSPHRASE):
        keys.open_keys(key_file=path, environ={})
    asked = []
    replaced, made = keys.open_keys(key_file=path, environ={},
                                    passphrase=lambda new: asked.append(new) or "first passphrase").create(replace=True)
    assert made and replaced != key and asked == [False]


def test_the_key_can_come_from_the_environment_and_never_from_a_plain_text_keyring(tmp_path: Path):
    env_key = "k" * 40
    store = keys.open_keys(key_file=tmp_path / "unused.cfg", environ={keys.ENV_KEY: env_key})
    assert store.get() == env_key and store.create() == (env_key, False)
    with pytest.raises(keys.KeyStoreUnavailable, match=keys.ENV_KEY):
        store.create(replace=True)
    with pytest.raises(keys.KeyStoreUnavailable, match="at least"):
        keys.open_keys(environ={keys.ENV_KEY: "short"})
    assert not (tmp_path / "unused.cfg").exists()
    chosen = keys.system_keyring()
    if chosen is None:  # no Secret Service here: the message says so and offers both ways out
        with pytest.raises(keys.KeyStoreUnavailable) as caught:
            keys.open_keys(key_file=tmp_path / "absent.cfg", environ={})
        message = str(caught.value)
        assert "no desktop keyring" in message and "--key-file" in message and keys.ENV_KEY in message
        assert "plain text" in message
    else:  # a desktop keyring: one of keyring's OS backends, never a keyrings.alt file
        assert type(chosen).__module__.startswith("keyring.backends.")
        assert "Plaintext" not in type(chosen).__name__


def test_the_server_listens_on_loopback_unless_told_otherwise(monkeypatch, capsys, tmp_path: Path):
    from wren.engine.terminal.main import main

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.org")
    monkeypatch.setenv(keys.ENV_KEY, "e" * 32)
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert main(["serve", "--show-key"]) == 0
    assert capsys.readouterr().out.strip() == "e" * 32
    with pytest.raises(InvalidRequest, match="at least 1"):
        ServerOptions(max_queue=0)
    for origin in ("not a url", "http://localhost:3000/app", "ftp://localhost"):  # CORS could never match
        assert main(["serve", "--cors-origin", origin, "--show-key"]) == 2
        assert "is not a page's origin, like http://localhost:3000" in capsys.readouterr().err
    assert main(["serve", "--cors-origin", "http://localhost:3000/", "--show-key"]) == 0  # as a browser sends it
    capsys.readouterr()


def test_show_key_and_new_key_with_the_encrypted_file(monkeypatch, capsys, tmp_path: Path, wren_home: Path):
    from wren.engine.terminal.main import main

    path = tmp_path / "kr" / "key.cfg"
    monkeypatch.delenv(keys.ENV_KEY, raising=False)
    monkeypatch.setenv(keys.ENV_PASSPHRASE, "cli passphrase")
    assert main(["serve", "--key-file", str(path), "--show-key"]) == 1  # none yet
    assert "no server key yet" in capsys.readouterr().err
    assert main(["serve", "--key-file", str(path), "--new-key", "--show-key"]) == 0
    out = capsys.readouterr()
    first = out.out.strip()
    assert first.startswith(keys.KEY_PREFIX) and "new API key" in out.err
    assert main(["serve", "--key-file", str(path), "--show-key"]) == 0
    assert capsys.readouterr().out.strip() == first
    assert main(["serve", "--key-file", str(path), "--new-key", "--show-key"]) == 0
    assert capsys.readouterr().out.strip() not in ("", first)
    for p in wren_home.rglob("*"):
        assert not p.is_file() or first.encode() not in p.read_bytes()


def test_cors_is_off_by_default_and_on_for_named_origins(serving):
    async def main():
        results = []
        for origins in ((), ("http://localhost:3000",)):
            async with serving("hi", options=ServerOptions(cors_origins=origins)) as s, httpx.AsyncClient(base_url=s.url, timeout=30) as http:
                pre = await http.options("/v1/models", headers={
                    "Origin": "http://localhost:3000", "Access-Control-Request-Method": "GET",
                    "Access-Control-Request-Headers": "authorization"})
                got = await http.get("/v1/models", headers={**s.headers, "Origin": "http://localhost:3000"})
                results.append((pre, got))
        return results

    (off_pre, off_get), (on_pre, on_get) = run(main())
    assert off_pre.status_code == 401 and "access-control-allow-origin" not in off_get.headers
    assert on_pre.status_code == 200 and on_pre.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert on_get.headers["access-control-allow-origin"] == "http://localhost:3000"


@pytest.mark.skipif(os.name == "nt", reason="file modes")
def test_nothing_in_the_data_folder_names_the_key_file_passphrase(tmp_path: Path, wren_home: Path):
    path = tmp_path / "kr.cfg"
    keys.open_keys(key_file=path, environ={keys.ENV_PASSPHRASE: "a passphrase nobody logs"}).create()
    for p in wren_home.rglob("*"):
        assert not p.is_file() or b"a passphrase nobody logs" not in p.read_bytes()
    assert b"a passphrase nobody logs" not in path.read_bytes()
