"""Text to speech with a Piper voice: Wren runs the voice's ONNX model with onnxruntime and
gets phonemes from the `espeak-ng` program (run as a separate process, not linked: eSpeak NG
is GPL-3.0, Wren is Apache-2.0). A voice is a .onnx file and its .onnx.json (sample rate,
phoneme ids, default scales), as rhasspy/piper-voices publishes them."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import WrenError
from .speakable import sentences, speakable
from .starter import starter_voice_files

PAUSE_SECONDS = 0.25  # silence between sentences
INSTALL_ESPEAK = ("speaking needs eSpeak NG's phonemizer, the `espeak-ng` program: install it "
                  "(Debian/Ubuntu: sudo apt install espeak-ng; Fedora: sudo dnf install espeak-ng; "
                  "macOS: brew install espeak-ng)")


class VoiceUnavailable(WrenError):
    """Speech cannot be made here (no phonemizer, a damaged voice file), and why."""


@dataclass(frozen=True)
class VoiceConfig:
    sample_rate: int
    espeak_voice: str
    phoneme_ids: dict[str, list[int]]
    noise_scale: float
    length_scale: float
    noise_w: float

    @classmethod
    def read(cls, path: Path) -> VoiceConfig:
        try:
            raw = json.loads(path.read_text("utf-8"))
            inference = raw.get("inference", {})
            return cls(int(raw["audio"]["sample_rate"]), str(raw.get("espeak", {}).get("voice", "en-us")),
                       {str(k): [int(i) for i in v] for k, v in raw["phoneme_id_map"].items()},
                       float(inference.get("noise_scale", 0.667)), float(inference.get("length_scale", 1.0)),
                       float(inference.get("noise_w", 0.8)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise VoiceUnavailable(f"the voice configuration {path} is not a Piper voice's .onnx.json: {exc}") from None


class Voice:
    """One Piper voice, loaded on first use; synthesize() may be called from any thread."""

    def __init__(self, model: Path | str | None = None, config: Path | str | None = None, *,
                 threads: int | None = None) -> None:
        if model is None:
            model, config = starter_voice_files()
        self.model_path = Path(model)
        self.config_path = Path(config) if config is not None else Path(f"{model}.json")
        self.config = VoiceConfig.read(self.config_path)
        self.threads = threads
        self._session = None
        self._lock = threading.Lock()

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    def load(self) -> None:
        with self._lock:
            self._load()

    def _load(self):
        if self._session is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads or 0
            options.log_severity_level = 3
            try:
                self._session = ort.InferenceSession(str(self.model_path), options, providers=["CPUExecutionProvider"])
            except Exception as exc:
                raise VoiceUnavailable(f"the voice {self.model_path} could not be loaded: {exc}") from None
        return self._session

    def phonemes(self, text: str) -> list[str]:
        """`text`'s phonemes, a string per clause espeak-ng found, with each clause's
        punctuation put back (the voice was trained with it: it shapes the pauses)."""
        program = shutil.which("espeak-ng") or shutil.which("espeak")
        if program is None:
            raise VoiceUnavailable(INSTALL_ESPEAK)
        flat = " ".join(text.split())
        try:
            done = subprocess.run([program, "-q", "--ipa", "-v", self.config.espeak_voice, "--stdin"], input=flat,
                                  capture_output=True, text=True, timeout=60, check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            raise VoiceUnavailable(f"espeak-ng could not phonemize the text: {exc}") from None
        clauses = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        marks = [m for m in _clause_marks(flat)]
        if len(marks) == len(clauses):
            clauses = [c + m for c, m in zip(clauses, marks, strict=True)]
        return [unicodedata.normalize("NFD", c) for c in clauses]

    def synthesize(self, text: str, *, speed: float = 1.0) -> np.ndarray:
        """Speech for `text` (Markdown is made speakable first) as float32 samples in
        [-1, 1] at sample_rate; sentence by sentence, with a short pause between."""
        if not 0.25 <= speed <= 4.0:
            raise WrenError(f"speed {speed} is out of range: use 0.25 to 4 (1 is the voice's own pace)")
        parts = []
        pause = np.zeros(int(self.sample_rate * PAUSE_SECONDS), dtype=np.float32)
        for sentence in sentences(speakable(text)):
            audio = self.sentence(sentence, speed=speed)
            if audio.size:
                parts += [audio, pause]
        return np.concatenate(parts[:-1]) if parts else np.zeros(0, dtype=np.float32)

    def sentence(self, text: str, *, speed: float = 1.0) -> np.ndarray:
        """One sentence's speech (no Markdown handling)."""
        ids = self._ids(" ".join(self.phonemes(text)))
        if len(ids) <= 3:
            return np.zeros(0, dtype=np.float32)
        c = self.config
        inputs = {"input": np.array([ids], dtype=np.int64), "input_lengths": np.array([len(ids)], dtype=np.int64),
                  "scales": np.array([c.noise_scale, c.length_scale / speed, c.noise_w], dtype=np.float32)}
        with self._lock:
            session = self._load()
            audio = session.run(None, inputs)[0]
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        peak = float(np.abs(audio).max()) if audio.size else 0.0
        return np.clip(audio / max(peak, 0.01) * 0.9, -1.0, 1.0) if peak > 0 else audio

    def _ids(self, phonemes: str) -> list[int]:
        """Piper's input: start, each phoneme's id followed by padding, end."""
        table = self.config.phoneme_ids
        pad, ids = table.get("_", [0]), list(table.get("^", [1])) + list(table.get("_", [0]))
        for symbol in phonemes:
            if symbol in table:
                ids += table[symbol] + pad
        return ids + list(table.get("$", [2]))


def _clause_marks(text: str) -> list[str]:
    """The punctuation that ends each clause, as espeak-ng splits clauses."""
    marks = []
    for n, ch in enumerate(text):
        if ch in ",.;:!?" and (n + 1 == len(text) or text[n + 1].isspace()):
            marks.append(ch)
    if text and (not marks or text.rstrip()[-1] not in ",.;:!?"):
        marks.append("")
    return marks
