"""Audio in and out as numpy arrays: any file FFmpeg reads (WAV, FLAC, MP3, Ogg, M4A, ...,
any sample rate, mono or stereo) decoded to mono float32 at 16 kHz, the rate Whisper hears;
WAV written as 16-bit PCM. A file that is not audio, is empty or is unreadable is an
AudioError that names the file and what was wrong."""

from __future__ import annotations

import os
import re
import tempfile
import wave
from pathlib import Path

import numpy as np

from ..errors import InvalidRequest

RATE = 16_000  # what the recognizer takes
LONGEST_SECONDS = 4 * 3600  # a longer file is refused before it is decoded (4 h: ~0.9 GB of samples)


class AudioError(InvalidRequest):
    """An audio file Wren cannot use, and why."""


def load_audio(path: Path | str) -> np.ndarray:
    """The file's sound as mono float32 samples at 16 kHz (channels averaged, resampled)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise AudioError(f"{path} does not exist")
    if not path.is_file():
        raise AudioError(f"{path} is not a file")
    if not os.access(path, os.R_OK):
        raise AudioError(f"{path} cannot be read (permission denied)")
    if path.stat().st_size == 0:
        raise AudioError(f"{path} is empty")
    seconds = _duration(path)
    if seconds is not None and seconds > LONGEST_SECONDS:
        raise AudioError(f"{path} is {_length(seconds)} long; Wren transcribes up to {_length(LONGEST_SECONDS)} "
                         f"at a time (split it first)")
    from faster_whisper.audio import decode_audio

    try:
        samples = decode_audio(str(path), sampling_rate=RATE)
    except Exception as exc:  # av's errors (not audio, damaged, no audio stream) and FFmpeg's
        raise AudioError(f"{path} is not an audio file Wren can read: {_reason(exc)}") from None
    return np.asarray(samples, dtype=np.float32)


def _duration(path: Path) -> float | None:
    """The container's stated length in seconds, when it states one (None: unknown)."""
    import av

    try:
        with av.open(str(path), metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise AudioError(f"{path} has no sound in it (no audio stream)")
            if container.duration is not None:
                return float(container.duration) / 1_000_000  # av.time_base
            stream = container.streams.audio[0]
            if stream.duration is not None and stream.time_base is not None:
                return float(stream.duration * stream.time_base)
    except AudioError:
        raise
    except Exception as exc:
        raise AudioError(f"{path} is not an audio file Wren can read: {_reason(exc)}") from None
    return None


def _length(seconds: float) -> str:
    return f"{seconds / 3600:.1f} hours" if seconds >= 3600 else f"{seconds:.0f} s"


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc).strip() or type(exc).__name__
    return re.sub(r"^\[Errno -?\d+\]\s*", "", str(text)).split(": '")[0]  # av adds the file name again


def to_pcm16(samples: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as little-endian 16-bit PCM (clipped, not wrapped)."""
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


def write_wav(path: Path | str, samples: np.ndarray, rate: int) -> Path:
    """Write mono 16-bit WAV; the file appears whole or not at all (temporary, then renamed)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InvalidRequest(f"{path} is a folder; give a file name such as {path / 'speech.wav'}")
    folder = path.parent
    if not folder.is_dir():
        raise InvalidRequest(f"cannot write {path}: the folder {folder} does not exist")
    data = to_pcm16(samples)
    try:
        fd, temp = tempfile.mkstemp(prefix=".wren-", suffix=".wav", dir=folder)
    except OSError as exc:
        raise InvalidRequest(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as raw, wave.open(raw, "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(rate)
            out.writeframes(data)
        os.replace(temp, path)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise InvalidRequest(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def resample(samples: np.ndarray, rate: int, to: int) -> np.ndarray:
    """Linear-interpolation resampling (enough for feeding the recognizer speech the window
    recorded at the device's rate, or playing a voice at the device's rate)."""
    samples = np.asarray(samples, dtype=np.float32)
    if rate == to or samples.size == 0:
        return samples
    n = max(1, round(samples.size * to / rate))
    positions = np.linspace(0, samples.size - 1, n, dtype=np.float64)
    return np.interp(positions, np.arange(samples.size), samples).astype(np.float32)
