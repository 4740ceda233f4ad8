"""A fake, scriptably flaky OpenAI-compatible server on 127.0.0.1 (plain asyncio streams,
so it can reset a connection at an exact byte), run on a thread of its own.

Each POST /v1/chat/completions takes the next scripted behaviour (then `default`):
  ("ok", text)                      stream `text` word by word, usage last, [DONE]
  ("status", code, headers)         answer an error status
  ("reset",)                        read the request, then reset the connection (no byte sent)
  ("cut", text, n)                  200 and the first n chunks of `text`, then reset
  ("malformed", text)               200, one good chunk, then a chunk that is not JSON
  ("hang",)                         read the request and never answer
  ("no-usage", text)                stream without a usage chunk
  ("reasoning", thinking, text, key) stream `thinking` word by word in delta[key] (e.g.
                                    "reasoning_content"), then `text` as "ok" does
GET /v1/models lists `models` (with max_model_len). Every request is recorded.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from dataclasses import dataclass, field

from wren.engine.threadloop import plain_event_loop


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict | None


@dataclass
class FakeServer:
    models: dict[str, int] = field(default_factory=lambda: {"fake-chat": 4096})
    default: tuple = ("ok", "Hello from the remote side.")
    script: list[tuple] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    delay: float = 0.0  # seconds between streamed chunks

    def __post_init__(self) -> None:
        self._loop = plain_event_loop()  # a plain loop also inside the window's tests (qasync's policy)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-openai", daemon=True)
        self._hangs: list[asyncio.StreamWriter] = []

    # -- control ---------------------------------------------------------------------

    def start(self) -> FakeServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def chats(self) -> list[Seen]:
        return [s for s in self.seen if s.path.endswith("/chat/completions")]

    def stop(self) -> None:
        async def shut():
            self._server.close()
            for w in self._hangs:
                w.close()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    # -- the server ------------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                size = int(headers.get("content-length", "0"))
                raw = await reader.readexactly(size) if size else b""
                body = json.loads(raw) if raw else None
                self.seen.append(Seen(method, path, headers, body))
                if path.endswith("/models"):
                    data = [{"id": m, "object": "model", "max_model_len": n} for m, n in self.models.items()]
                    await self._json(writer, 200, {"object": "list", "data": data})
                    continue
                behaviour = self.script.pop(0) if self.script else self.default
                if not await self._chat(writer, behaviour):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def _json(self, writer, status: int, payload: dict, headers: dict | None = None) -> None:
        raw = json.dumps(payload).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
                     f"{extra}\r\n".encode() + raw)
        await writer.drain()

    @staticmethod
    def _reset(writer) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST
        writer.transport.abort()

    async def _chat(self, writer, behaviour: tuple) -> bool:
        kind = behaviour[0]
        if kind == "status":
            _, code, headers = behaviour
            await self._json(writer, code, {"error": {"message": f"fake status {code}"}}, headers)
            return True
        if kind == "reset":
            self._reset(writer)
            return False
        if kind == "hang":
            self._hangs.append(writer)
            await asyncio.sleep(3600)
            return False
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        text = behaviour[2] if kind == "reasoning" else behaviour[1]
        words = [w + " " for w in text.split(" ")]
        words[-1] = words[-1][:-1]
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        if kind == "reasoning":
            events += [{"choices": [{"index": 0, "delta": {behaviour[3]: w + " "}, "finish_reason": None}]}
                       for w in behaviour[1].split(" ")]
        events += [{"choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in words]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if kind != "no-usage":
            events.append({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": len(words)}})
        for i, event in enumerate(events):
            if kind == "cut" and i == behaviour[2] + 1:  # the role chunk, then n content chunks
                await asyncio.sleep(0.05)
                self._reset(writer)
                return False
            if kind == "malformed" and i == 2:
                await self._chunk(writer, b"data: {\"choices\": [oops\n\n")
                await asyncio.sleep(0.05)
                self._reset(writer)
                return False
            await self._chunk(writer, f"data: {json.dumps(event)}\n\n".encode())
            if self.delay:
                await asyncio.sleep(self.delay)
        await self._chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    @staticmethod
    async def _chunk(writer, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()
