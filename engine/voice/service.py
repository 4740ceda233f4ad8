"""`engine.voice`: what the window needs for dictation and read-aloud — one recognizer and
one voice, loaded on first use and shared; listeners for the microphone; sentences of a
streaming answer; whether each half works here, and if not why. The audio devices are the
window's (desktop/voice); no audio is kept unless the setting says so."""

from __future__ import annotations

import asyncio
import shutil
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import WrenError
from .listen import Listener
from .speakable import SentenceStream
from .speech import INSTALL_ESPEAK, Voice
from .starter import starter_stt_dir, starter_voice_files
from .stt import Transcriber, Transcript

if TYPE_CHECKING:
    from ..settings import Settings

SPEED_KEY = "voice.speed"  # read-aloud pace, 0.25 to 4
KEEP_AUDIO_KEY = "voice.keep_audio"  # False: recordings are dropped once transcribed
INPUT_DEVICE_KEY = "voice.input_device"  # a device name; None: the system's default
AUTO_SEND_KEY = "voice.auto_send"  # voice mode: a transcript is sent at once and the answer read aloud


@dataclass(frozen=True)
class VoiceStatus:
    """Whether dictation and read-aloud work here; each None when it does, else why not."""

    dictation_problem: str | None
    speech_problem: str | None


class VoiceService:
    def __init__(self, settings: Settings | None = None, *, threads: int | None = None) -> None:
        self.settings = settings
        self.threads = threads
        self._transcriber: Transcriber | None = None
        self._voice: Voice | None = None
        self._lock = threading.Lock()

    def status(self) -> VoiceStatus:
        dictation = speech = None
        try:
            starter_stt_dir()
        except WrenError as exc:
            dictation = str(exc)
        try:
            starter_voice_files()
        except WrenError as exc:
            speech = str(exc)
        if speech is None and shutil.which("espeak-ng") is None and shutil.which("espeak") is None:
            speech = INSTALL_ESPEAK
        return VoiceStatus(dictation, speech)

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

    async def transcribe(self, samples: np.ndarray) -> Transcript:
        """16 kHz mono samples' words, off the caller's loop."""
        return await asyncio.get_running_loop().run_in_executor(None, self.transcriber().transcribe, samples)

    async def synthesize(self, text: str, speed: float | None = None) -> tuple[np.ndarray, int]:
        """Speech for `text` (Markdown made speakable) and its sample rate, off the loop."""
        if speed is None:
            speed = await self.speed()
        voice = self.voice()
        samples = await asyncio.get_running_loop().run_in_executor(None, lambda: voice.synthesize(text, speed=speed))
        return samples, voice.sample_rate

    async def speed(self) -> float:
        value = await self.settings.get(SPEED_KEY) if self.settings is not None else None
        return float(value) if isinstance(value, (int, float)) and 0.25 <= value <= 4 else 1.0

    async def preload(self) -> None:
        """Load the recognizer and the voice now (a few seconds), so the first use is quick."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.transcriber().load)
        await loop.run_in_executor(None, self.voice().load)
