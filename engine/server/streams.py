"""Wren's conversation stream: SSE with ChatGPT's v1 delta encoding, numbered for resuming.

One answer's stream, as `POST /api/conversation` sends it:

    event: delta_encoding
    data: "v1"

    data: {"type": "resume_conversation_token", "token": "…", "conversation_id": 1, "message_id": 2}

    id: 1
    event: delta
    data: {"p": "/message/content/parts/0", "o": "append", "v": "The"}

    id: 2
    event: delta
    data: {"v": " answer"}

    id: 3
    data: {"type": "title_generation", "title": "…", "conversation_id": 1}

    id: 4
    event: delta
    data: {"p": "", "o": "patch", "v": [{"p": "/message/status", "o": "replace", "v": "finished_successfully"}, …]}

    id: 5
    data: {"type": "message_stream_complete", "conversation_id": 1}

    data: [DONE]

The two lines before the numbered chunks are sent again at the head of every resumed
stream; chunks carry their number as the SSE `id`, so `from=N` (or the standard
Last-Event-ID header) replays exactly the chunks after N. A bare `{"v": …}` repeats the
last delta event's path and operation; typed events (`"type"`) never change that state.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable

from ..events import FinishReason

APPEND_PATH = "/message/content/parts/0"
KEEP_SECONDS = 300.0  # a finished answer's chunks stay resumable this long
DONE = b"data: [DONE]\n\n"
HEADER = b'event: delta_encoding\ndata: "v1"\n\n'

# Message status and finish details, as the seed's stream names them.
STATUS = {
    FinishReason.STOP: ("finished_successfully", "stop"),
    FinishReason.LENGTH: ("finished_successfully", "max_tokens"),
    FinishReason.CANCELLED: ("finished_partial_completion", "interrupted"),
    FinishReason.BLOCKED: ("blocked", "content_filter"),
    FinishReason.ERROR: ("failed", "error"),
}


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


class AnswerLog:
    """The numbered chunks of one answer, kept so a dropped client can pick it up again.
    Written by the task producing the answer; read by any number of followers."""

    def __init__(self, token: str, conversation_id: int, message_id: int | None = None):
        self.token = token
        self.conversation_id = conversation_id
        self.message_id = message_id
        self.chunks: list[bytes] = []  # chunk n is chunks[n - 1]
        self.done = False
        self.finished_at: float | None = None
        self._wake = asyncio.Event()
        self._appending = False  # whether the last delta event was the append op

    # -- writing ---------------------------------------------------------------------

    def _add(self, event: str | None, payload) -> None:
        n = len(self.chunks) + 1
        head = f"id: {n}\n" + (f"event: {event}\n" if event else "")
        self.chunks.append(f"{head}data: {dumps(payload)}\n\n".encode())
        self._wake.set()
        self._wake = asyncio.Event()

    def delta(self, text: str) -> None:
        if self._appending:
            self._add("delta", {"v": text})
        else:
            self._add("delta", {"p": APPEND_PATH, "o": "append", "v": text})
            self._appending = True

    def typed(self, payload: dict) -> None:
        self._add(None, payload)

    def finish(self, reason: FinishReason, metadata: dict) -> None:
        status, kind = STATUS[reason]
        ops = [
            {"p": "/message/status", "o": "replace", "v": status},
            {"p": "/message/end_turn", "o": "replace", "v": reason is not FinishReason.CANCELLED},
            {"p": "/message/metadata", "o": "append",
             "v": {"finish_details": {"type": kind}, "is_complete": True, **metadata}},
        ]
        self._add("delta", {"p": "", "o": "patch", "v": ops})
        self._appending = False

    def close(self) -> None:
        self.done = True
        self.finished_at = time.monotonic()
        self._wake.set()

    # -- reading ---------------------------------------------------------------------

    def head(self) -> bytes:
        token = {"type": "resume_conversation_token", "token": self.token,
                 "conversation_id": self.conversation_id, "message_id": self.message_id}
        return HEADER + f"data: {dumps(token)}\n\n".encode()

    async def follow(self, after: int = 0, *, coalesce: bool = True) -> AsyncIterator[bytes]:
        """The header, the chunks after number `after` (those there are, then live ones),
        and [DONE] once the answer is complete. With `coalesce`, everything ready at once
        goes out as one write (the header with the chunks already there, or several chunks
        a slow reader fell behind on), so the client wakes once for them, not once each."""
        pending = [self.head()]
        n = max(0, after)
        while True:
            while n < len(self.chunks):
                n += 1
                pending.append(self.chunks[n - 1])
            if self.done:
                pending.append(DONE)
            if coalesce and len(pending) > 1:
                pending = [b"".join(pending)]
            for data in pending:
                yield data
            pending = []
            if self.done:
                return
            await self._wake.wait()


class AnswerLogs:
    """Every resumable answer, by resume token; finished ones expire after KEEP_SECONDS."""

    def __init__(self, keep_seconds: float = KEEP_SECONDS,
                 make_token: Callable[[], str] = lambda: secrets.token_urlsafe(24)):
        self.keep_seconds = keep_seconds
        self._make_token = make_token
        self._logs: dict[str, AnswerLog] = {}

    def new(self, conversation_id: int) -> AnswerLog:
        self._prune()
        log = AnswerLog(self._make_token(), conversation_id)
        self._logs[log.token] = log
        return log

    def find(self, token: str, conversation_id: int) -> AnswerLog | None:
        self._prune()
        for known, log in self._logs.items():
            # compare_digest on every entry: how long this takes says nothing about a token
            if secrets.compare_digest(known.encode(), token.encode()) and log.conversation_id == conversation_id:
                return log
        return None

    def live(self) -> int:
        return sum(not log.done for log in self._logs.values())

    def _prune(self) -> None:
        now = time.monotonic()
        for token in [t for t, log in self._logs.items()
                      if log.done and log.finished_at is not None and now - log.finished_at > self.keep_seconds]:
            del self._logs[token]
