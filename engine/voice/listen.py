"""Listening: microphone samples in, a question out. Each 32 ms of sound gets a level (for
the meter) and a speech probability from Silero's voice-activity detector (shipped with
faster-whisper), carried across chunks as a stream; speech that is followed by `end_silence`
seconds of non-speech has ended. Partial transcripts can be asked for while the user speaks.
Qt-free: the window feeds it from its audio thread's queue, off the GUI thread.

Barge-in: while Wren speaks, the same detector on the microphone says when the user starts
talking (Listener.speaking), so playback can stop. Without headphones the microphone hears
Wren too, and its voice is speech to the detector: the echo guard (EchoGuard, for barge-in
listeners) learns how loud what the microphone hears is during the first half second of
playback, and counts as the user only speech clearly louder than that, held for a moment.
It cannot tell a quiet user from a loud speaker: the window says to use headphones."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from .audio import RATE
from .stt import Transcriber, Transcript

CHUNK = 512  # Silero's window at 16 kHz: 32 ms
CONTEXT = 64  # samples of the previous window it sees
SPEECH_ON, SPEECH_OFF = 0.5, 0.35  # hysteresis: a word's quiet middle does not end it


class EchoGuard:
    """Speech counts only when `margin_db` louder than what was heard during the first
    `learn_seconds` (Wren's own voice from the speakers, or the room), and `hold_seconds` long."""

    def __init__(self, *, learn_seconds: float = 0.5, margin_db: float = 10.0, hold_seconds: float = 0.25,
                 speech_on: float = 0.8) -> None:
        self.learn_windows = max(1, round(learn_seconds * RATE / CHUNK))
        self.hold_windows = max(1, round(hold_seconds * RATE / CHUNK))
        self.margin_db = margin_db
        self.speech_on = speech_on
        self._levels: list[float] = []
        self._run = 0

    @property
    def baseline_db(self) -> float | None:
        return float(np.median(self._levels)) if len(self._levels) >= self.learn_windows else None

    def __call__(self, level_db: float, probability: float) -> bool:
        """Whether this window is the user speaking."""
        if len(self._levels) < self.learn_windows:
            self._levels.append(level_db)
            return False
        loud = level_db >= (self.baseline_db or -100.0) + self.margin_db
        self._run = self._run + 1 if loud and probability >= self.speech_on else 0
        return self._run >= self.hold_windows


class StreamingVad:
    """Silero VAD over a stream: probability per 512-sample window, state kept between calls."""

    def __init__(self) -> None:
        from faster_whisper.vad import get_vad_model

        self._session = get_vad_model().session
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)

    def __call__(self, window: np.ndarray) -> float:
        framed = np.concatenate([self._context, window.astype(np.float32)])[None, :]
        out, self._h, self._c = self._session.run(None, {"input": framed, "h": self._h, "c": self._c})
        self._context = window[-CONTEXT:].astype(np.float32)
        return float(np.asarray(out).reshape(-1)[0])


@dataclass(frozen=True)
class Heard:
    """What feed() noticed: the loudness of the last window (dBFS, -100 for silence), whether
    speech is going on, and whether it has just started or ended."""

    level_db: float
    speaking: bool
    started: bool = False
    ended: bool = False
    timed_out: bool = False  # nothing said for no_speech_timeout, or max_seconds reached


class Listener:
    """One utterance: feed() 16 kHz mono samples as they come; `ended` turns true once speech
    was followed by `end_silence` seconds without it; transcript() gives the words."""

    def __init__(self, transcriber: Transcriber | None = None, *, end_silence: float = 0.8,
                 no_speech_timeout: float = 8.0, max_seconds: float = 120.0, vad: StreamingVad | None = None,
                 echo_guard: EchoGuard | None = None) -> None:
        self.transcriber = transcriber
        self.end_silence = end_silence
        self.no_speech_timeout = no_speech_timeout
        self.max_seconds = max_seconds
        self.vad = vad or StreamingVad()
        self.echo_guard = echo_guard  # barge-in while Wren speaks: its own voice is not the user
        self._lock = threading.Lock()
        self._pending = np.zeros(0, dtype=np.float32)
        self._audio: list[np.ndarray] = []
        self._samples = 0
        self._speech_at: int | None = None  # sample where speech began
        self._last_speech = 0  # sample where speech was last heard
        self.speaking = False
        self.ended = False

    @property
    def seconds(self) -> float:
        return self._samples / RATE

    def feed(self, samples: np.ndarray) -> Heard:
        """Take the next samples; what the last complete window sounded like."""
        with self._lock:
            self._pending = np.concatenate([self._pending, np.asarray(samples, dtype=np.float32).reshape(-1)])
            level, started, ended = -100.0, False, False
            while self._pending.size >= CHUNK and not self.ended:
                window, self._pending = self._pending[:CHUNK], self._pending[CHUNK:]
                self._audio.append(window)
                self._samples += CHUNK
                level = _db(window)
                probability = self.vad(window)
                if self.echo_guard is not None:
                    probability = 1.0 if self.echo_guard(level, probability) else 0.0
                if probability >= SPEECH_ON or (self.speaking and probability >= SPEECH_OFF):
                    if not self.speaking and self._speech_at is None:
                        self._speech_at, started = self._samples - CHUNK, True
                    self.speaking, self._last_speech = True, self._samples
                elif self.speaking and (self._samples - self._last_speech) / RATE >= self.end_silence:
                    self.speaking, self.ended, ended = False, True, True
            timed_out = not self.ended and (self.seconds >= self.max_seconds or (
                self._speech_at is None and self.seconds >= self.no_speech_timeout))
            if timed_out:
                self.ended = True
            return Heard(level, self.speaking, started, ended, timed_out)

    @property
    def last_speech_seconds(self) -> float:
        """When speech was last heard, in seconds from the first sample."""
        return self._last_speech / RATE

    @property
    def heard_speech(self) -> bool:
        return self._speech_at is not None

    def audio(self) -> np.ndarray:
        """Everything heard so far, from a little before speech began."""
        with self._lock:
            whole = np.concatenate(self._audio) if self._audio else np.zeros(0, dtype=np.float32)
            start = max(0, (self._speech_at or 0) - RATE // 4)
            return whole[start:]

    def transcript(self) -> Transcript:
        """The words so far (a partial transcript while the user speaks; the final one after)."""
        if self.transcriber is None:
            raise RuntimeError("this Listener has no transcriber")
        if not self.heard_speech:
            return Transcript("", duration=self.seconds)
        return self.transcriber.transcribe(self.audio())


def _db(window: np.ndarray) -> float:
    rms = float(np.sqrt(np.mean(np.square(window, dtype=np.float64))))
    return -100.0 if rms <= 1e-5 else max(-100.0, 20 * math.log10(rms))
