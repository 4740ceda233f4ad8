"""The "keep audio" privacy setting: off by default nothing is written; when on, a dictated
question's audio is kept with its chat, and it leaves the disk when the chat is purged or
everything is erased. Temporary chats keep none."""

from __future__ import annotations

import asyncio
import wave

import numpy as np

from wren.engine.voice.service import KEEP_AUDIO_SETTING


async def drain(stream):
    return [event async for event in stream]


def tone(seconds: float = 0.5) -> np.ndarray:
    t = np.arange(int(16_000 * seconds)) / 16_000
    return (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def test_kept_audio_goes_with_its_chat(make_engine, wren_home):
    async def main():
        engine = make_engine("Noted.")
        engine.privacy.undo_seconds = 3600
        assert await engine.settings.get(KEEP_AUDIO_SETTING, False) is False  # off unless the user asks
        conv = await engine.conversations.create("spoken")
        other = await engine.conversations.create("also spoken")
        await drain(engine.chat.send(conv.id, "a question"))
        kept = engine.voice.keep_audio(conv.id, tone())
        engine.voice.keep_audio(other.id, tone())
        assert kept is not None and kept.is_relative_to(wren_home)
        with wave.open(str(kept), "rb") as w:
            assert (w.getframerate(), w.getnchannels(), w.getnframes()) == (16_000, 1, 8_000)
        assert engine.voice.recordings(conv.id) == [kept]
        await engine.conversations.delete(conv.id, permanently=True)
        assert engine.voice.recordings(conv.id) == [] and not kept.exists()
        assert len(engine.voice.recordings(other.id)) == 1  # another chat's audio stays
        report = await engine.privacy.erase_all()
        assert engine.voice.recordings(other.id) == []
        assert any(path.endswith("voice-audio") for path in report.removed)
        await engine.close()

    asyncio.run(main())


def test_a_temporary_chat_keeps_no_audio(make_engine):
    async def main():
        engine = make_engine("Noted.")
        stream = engine.chat.send_new("hello", temporary=True)
        events = await drain(stream)
        conversation_id = events[0].conversation_id
        assert engine.voice.keep_audio(conversation_id, tone()) is None
        assert engine.voice.recordings(conversation_id) == []
        await engine.close()

    asyncio.run(main())
