"""`engine.voice`: what the window needs for dictation and read-aloud — one recognizer and
one voice, loaded on first use and shared (which ones: the user's choice, `choose`);
listeners for the microphone; sentences of a streaming answer; the voice models offered and
installed (`models`); dictated audio kept with its chat only when the user asks (`keep_audio`).
The audio devices are the window's (desktop/voice)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from . import recordings
from .catalog import STT, VOICE, VoiceModel, VoiceModels
from .listen import EchoGuard, Listener
from .speakable import SentenceStream
from .speech import Voice
from .stt import Transcriber

STT_SETTING = "voice.stt_model"  # a voice model id; None: the starter recognizer
VOICE_SETTING = "voice.voice"  # a voice model id; None: the starter voice
INPUT_SETTING = "voice.input_device"  # the microphone's name; None: the system's default
KEEP_AUDIO_SETTING = recordings.KEEP_AUDIO_SETTING


class VoiceService:
    def __init__(self, *, threads: int | None = None, models: VoiceModels | None = None,
                 data: Path | None = None) -> None:
        self.threads = threads
        self.models = models or VoiceModels()
        self._data = data  # where kept recordings go (None: Wren's data folder)
        self._transcriber: Transcriber | None = None
        self._voice: Voice | None = None
        self.stt_model: str | None = None
        self.voice_model: str | None = None
        self._lock = threading.Lock()

    def transcriber(self) -> Transcriber:
        with self._lock:
            if self._transcriber is None:
                folder = None if self.stt_model is None else self.models.stt_dir(self.stt_model)  # None: found on load
                self._transcriber = Transcriber(folder, threads=self.threads)
            return self._transcriber

    def voice(self) -> Voice:
        with self._lock:
            if self._voice is None:
                model, config = self.models.voice_files(self.voice_model)
                self._voice = Voice(model, config, threads=self.threads)
            return self._voice

    def choose(self, *, stt: str | None = None, voice: str | None = None) -> None:
        """Use these installed models from the next recognition or sentence on (None: the
        starter one). A model that is not installed, or of the other kind, is refused."""
        self.models.stt_dir(stt)
        self.models.voice_files(voice)
        with self._lock:
            if stt != self.stt_model:
                self.stt_model, self._transcriber = stt, None
            if voice != self.voice_model:
                self.voice_model, self._voice = voice, None

    def offered(self, kind: str | None = None) -> list[VoiceModel]:
        """The starter and downloadable recognizers (STT) and voices (VOICE), marked installed."""
        return self.models.all(kind)

    def pull(self, model_id: str, **options: Any) -> VoiceModel:
        """Download a voice model (VoiceModels.pull: progress, cancel). Blocking: off the GUI thread."""
        return self.models.pull(model_id, **options)

    def listener(self, **options: Any) -> Listener:
        """A listener for one utterance (Listener's options: end_silence, no_speech_timeout,
        max_seconds); with transcribe=False, one that only detects speech; echo_guard=True
        adds the guard against hearing Wren's own voice from the speakers (barge-in)."""
        transcribe = options.pop("transcribe", True)
        if options.pop("echo_guard", False):
            options["echo_guard"] = EchoGuard()
        return Listener(self.transcriber() if transcribe else None, **options)

    def keep_audio(self, conversation_id: int, samples: np.ndarray) -> Path | None:
        """Save a dictated question's audio with its chat (only called when the user's
        KEEP_AUDIO_SETTING is on); None for a temporary chat."""
        return recordings.keep(conversation_id, samples, data=self._data)

    def recordings(self, conversation_id: int) -> list[Path]:
        return recordings.recordings(conversation_id, data=self._data)

    @staticmethod
    def sentence_stream() -> SentenceStream:
        return SentenceStream()


__all__ = ["INPUT_SETTING", "KEEP_AUDIO_SETTING", "STT", "STT_SETTING", "VOICE", "VOICE_SETTING", "VoiceService"]
