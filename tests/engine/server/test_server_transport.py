"""How the server puts streams on the wire: chunks ready at once go out as one write (the same
bytes either way), uvicorn's C parser when it is installed, and idle connections kept open
longer than clients keep them."""

from __future__ import annotations

import asyncio

from wren.engine.events import FinishReason
from wren.engine.server.streams import DONE, HEADER, AnswerLog


def _log() -> AnswerLog:
    log = AnswerLog("tok", conversation_id=3, message_id=4)
    log.delta("The")
    log.delta(" answer")
    return log


async def _collect(log: AnswerLog, *, coalesce: bool, after: int = 0, finish_later: bool = False) -> list[bytes]:
    writes = []

    async def finish_soon() -> None:
        await asyncio.sleep(0.01)
        log.delta(" goes on")
        log.finish(FinishReason.STOP, {"message_id": 4})
        log.close()

    task = asyncio.ensure_future(finish_soon()) if finish_later else None
    async for data in log.follow(after, coalesce=coalesce):
        writes.append(data)
    if task is not None:
        await task
    return writes


def test_chunks_ready_together_go_out_as_one_write_with_the_same_bytes():
    async def main():
        joined = await _collect(_log(), coalesce=True, finish_later=True)
        apart = await _collect(_log(), coalesce=False, finish_later=True)
        return joined, apart

    joined, apart = asyncio.run(main())
    assert b"".join(joined) == b"".join(apart)
    assert joined[0].startswith(HEADER) and b'"v": "The"' in joined[0] and b'" answer"' in joined[0]
    assert len(joined) == 2  # the header with the two chunks there, then the rest once it came
    assert joined[-1].endswith(DONE) and b'"v": " goes on"' in joined[-1]
    assert len(apart) == 6  # header, 2 chunks, then the live chunk, the patch and [DONE] one by one
    assert apart[0] == _log().head() and apart[-1] == DONE


def test_a_resumed_stream_coalesces_the_chunks_it_missed():
    log = _log()
    log.finish(FinishReason.STOP, {"message_id": 4})
    log.close()
    writes = asyncio.run(_collect(log, coalesce=True, after=1))
    assert len(writes) == 1
    assert writes[0] == log.head() + b"".join(log.chunks[1:]) + DONE


def test_the_server_uses_httptools_and_keeps_idle_connections_past_clients_expiry(serving):
    import httptools  # noqa: F401  (a dependency: `make test` installs it)
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from wren.engine.server.app import KEEP_ALIVE_SECONDS, ServerOptions

    async def main():
        kinds = []
        for options in (None, ServerOptions(http="h11")):
            async with serving(options=options) as s:
                config = s.server.server.config
                kinds.append((config.http_protocol_class, config.timeout_keep_alive))
        return kinds

    (default, h11) = asyncio.run(main())
    assert default == (HttpToolsProtocol, KEEP_ALIVE_SECONDS) and h11[0] is H11Protocol
    assert KEEP_ALIVE_SECONDS > 5  # httpx (the openai client's transport) keeps idle connections 5 s
