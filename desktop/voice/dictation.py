"""Dictation: the microphone's sound through the engine's Listener on a worker thread, with
the level for the meter, partial words while the user speaks, and the final transcript when
speech ends (or the user stops it). Nothing touches the GUI thread but the signals."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Signal

from .devices import AudioInput, AudioUnavailable, default_input

SILENT_DEVICE_SECONDS = 2.0  # a microphone that sends nothing this long was unplugged
LEVEL_EVERY = 1 / 15  # the meter is redrawn at most this often


@dataclass(frozen=True)
class Heard:
    """One finished utterance: the words, the language the recognizer heard (a multilingual
    model detects it), and the sound from a little before speech began (kept only when the
    user's "keep audio" setting says so)."""

    text: str
    language: str
    audio: np.ndarray


class Dictation(QObject):
    """One utterance at a time: start() listens, stop() ends it early, cancel() drops it."""

    listening = Signal(bool)
    level = Signal(float)  # dBFS of the latest 32 ms
    speech_started = Signal()
    partial = Signal(str)
    finished = Signal(str)  # the transcript ("" when nothing was said)
    heard = Signal(object)  # Heard, just before `finished`, when words were heard
    failed = Signal(str)

    def __init__(self, voice: Any, *, input_factory: Callable[[], AudioInput] = default_input,
                 partial_every: float = 1.2, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.voice = voice  # engine.voice
        self.input_factory = input_factory
        self.partial_every = partial_every
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._cancel = threading.Event()

    @property
    def active(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, **listener_options: Any) -> None:
        if self.active:
            return
        self._stop.clear()
        self._cancel.clear()
        samples: queue.Queue = queue.Queue()
        try:
            device = self.input_factory()
            device.start(samples.put)
        except AudioUnavailable as exc:
            self.failed.emit(str(exc))
            return
        listener = self.voice.listener(**listener_options)
        self._thread = threading.Thread(target=self._run, args=(device, listener, samples),
                                        name="wren-dictation", daemon=True)
        self.listening.emit(True)
        self._thread.start()

    def stop(self) -> None:
        """End now; what was said so far is transcribed."""
        self._stop.set()

    def cancel(self) -> None:
        """End now and drop it."""
        self._cancel.set()
        self._stop.set()

    def _run(self, device: AudioInput, listener: Any, samples: queue.Queue) -> None:
        last_sound = last_level = last_partial = time.monotonic()
        problem = None
        try:
            while not self._stop.is_set() and not listener.ended:
                try:
                    block = samples.get(timeout=0.1)
                except queue.Empty:
                    if time.monotonic() - last_sound > SILENT_DEVICE_SECONDS:
                        problem = "the microphone stopped sending sound (was it unplugged?)"
                        break
                    continue
                last_sound = time.monotonic()
                heard = listener.feed(block)
                if heard.started:
                    self.speech_started.emit()
                if last_sound - last_level >= LEVEL_EVERY:
                    self.level.emit(heard.level_db)
                    last_level = last_sound
                if (listener.speaking and listener.transcriber is not None
                        and last_sound - last_partial >= self.partial_every):
                    self.partial.emit(listener.transcript().text)
                    last_partial = time.monotonic()
        finally:
            device.stop()
        text = ""
        if not self._cancel.is_set() and listener.transcriber is not None and listener.heard_speech:
            transcript = listener.transcript()
            text = transcript.text
            if text:
                self.heard.emit(Heard(text, transcript.language, listener.audio()))
        self.listening.emit(False)
        if problem is not None:
            self.failed.emit(problem)
        self.finished.emit("" if self._cancel.is_set() else text)
