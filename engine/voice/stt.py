"""Speech to text with Whisper (faster-whisper, CTranslate2 int8 on the CPU). Silence and
noise are cut by the voice-activity detector faster-whisper ships (Silero VAD), so a file
with no speech gives an empty transcript (Transcript.heard is False), not invented words."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ModelFileError
from .audio import RATE, load_audio
from .starter import starter_stt_dir


@dataclass(frozen=True)
class Segment:
    start: float  # seconds from the start of the audio
    end: float
    text: str

    def to_dict(self) -> dict:
        return {"start": round(self.start, 2), "end": round(self.end, 2), "text": self.text}


@dataclass(frozen=True)
class Transcript:
    text: str
    segments: tuple[Segment, ...] = ()
    language: str = "en"
    duration: float = 0.0  # seconds of audio heard
    seconds: float = 0.0  # how long recognition took
    extra: dict = field(default_factory=dict)

    @property
    def heard(self) -> bool:
        return bool(self.text.strip())

    def to_dict(self) -> dict:
        return {"text": self.text, "language": self.language, "duration": round(self.duration, 2),
                "segments": [s.to_dict() for s in self.segments]}


class Transcriber:
    """One Whisper model, loaded on first use; transcribe() may be called from any thread
    (one at a time: CTranslate2's model is shared)."""

    def __init__(self, model_dir: Path | str | None = None, *, threads: int | None = None,
                 beam_size: int = 5) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.threads = threads
        self.beam_size = beam_size
        self._model = None
        self._lock = threading.Lock()

    @property
    def multilingual(self) -> bool:
        return bool(self._load().model.is_multilingual)

    def _load(self):
        if self._model is None:
            from faster_whisper import WhisperModel

            folder = self.model_dir or starter_stt_dir()
            try:
                self._model = WhisperModel(str(folder), device="cpu", compute_type="int8",
                                           cpu_threads=self.threads or 0, local_files_only=True)
            except Exception as exc:  # CTranslate2's errors for a damaged or foreign model.bin
                raise ModelFileError(f"the speech recognizer in {folder} could not be loaded ({exc}); "
                                     "pull it again, or remove it") from None
        return self._model

    def load(self) -> None:
        """Load the model now (the first transcription otherwise pays for it)."""
        with self._lock:
            self._load()

    def transcribe(self, audio: np.ndarray | Path | str, *, language: str | None = None,
                   on_segment: Callable[[Segment], None] | None = None) -> Transcript:
        """The speech in `audio` (a file, or mono float32 samples at 16 kHz). A multilingual
        model detects the language unless `language` is given; an English-only one hears
        English. `on_segment` gets each segment as it is recognised (long files)."""
        import time

        samples = load_audio(audio) if isinstance(audio, (str, Path)) else np.asarray(audio, dtype=np.float32)
        if samples.ndim != 1:
            samples = samples.mean(axis=tuple(range(1, samples.ndim)))  # channels last or first: mono
        started = time.perf_counter()
        with self._lock:
            model = self._load()
            if not model.model.is_multilingual:
                language = "en"
            pieces, info = model.transcribe(samples, language=language, beam_size=self.beam_size,
                                            vad_filter=True, condition_on_previous_text=False)
            segments = []
            for piece in pieces:  # a generator: recognition happens while it is read
                segment = Segment(float(piece.start), float(piece.end), piece.text.strip())
                if not segment.text:
                    continue
                segments.append(segment)
                if on_segment is not None:
                    on_segment(segment)
        text = " ".join(s.text for s in segments).strip()
        return Transcript(text, tuple(segments), info.language, samples.size / RATE, time.perf_counter() - started,
                          {"language_probability": round(float(info.language_probability), 3)})
