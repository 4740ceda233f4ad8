"""`engine.voice`: what the window needs for dictation and read-aloud — one recognizer and
one voice, loaded on first use and shared; listeners for the microphone; sentences of a
streaming answer. The audio devices are the window's (desktop/voice); no audio is kept."""

from __future__ import annotations

import threading
from typing import Any

from .listen import Listener
from .speakable import SentenceStream
from .speech import Voice
from .stt import Transcriber


class VoiceService:
    def __init__(self, *, threads: int | None = None) -> None:
        self.threads = threads
        self._transcriber: Transcriber | None = None
        self._voice: Voice | None = None
        self._lock = threading.Lock()

    def transcriber(self) -> Transcriber:
        with self._lock:
            if self._transcriber is None:
                self._transcriber = Transcriber(threads=self.threads)
            return self._transcriber

    def voice(self) -> Voice:
        with self._lock:
            if self._voice is None:
                self._voice = Voice(threads=self.threads)
            return self._voice

    def listener(self, **options: Any) -> Listener:
        """A listener for one utterance (Listener's options: end_silence, no_speech_timeout,
        max_seconds); with transcribe=False, one that only detects speech (barge-in)."""
        transcribe = options.pop("transcribe", True)
        return Listener(self.transcriber() if transcribe else None, **options)

    @staticmethod
    def sentence_stream() -> SentenceStream:
        return SentenceStream()
