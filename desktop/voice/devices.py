"""Audio devices: the microphone and the speakers through PortAudio (`sounddevice`), and two
stand-ins at the same layer for tests and demonstrations — a WAV file played into the input
in real time, and an output that keeps what it was given (WREN_AUDIO_INPUT=wav:PATH,
WREN_AUDIO_OUTPUT=memory). Each input calls `sink(samples)` with mono float32 at 16 kHz
from its own thread.

Why PortAudio rather than QtMultimedia: QtMultimedia is in PySide6-Addons, a 175 MB wheel
(measured, 6.11.3 manylinux) for one module; `sounddevice` is 33 kB and its macOS and Windows
wheels carry PortAudio, on Linux it is the 70 kB libportaudio2 package. Both deliver
callbacks every ~20 ms off the GUI thread."""

from __future__ import annotations

import os
import sys
import threading
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

RATE = 16_000
BLOCK = 320  # 20 ms at 16 kHz
Sink = Callable[[np.ndarray], None]

if sys.platform == "darwin":
    MIC_SETTINGS = "System Settings → Privacy & Security → Microphone"
elif sys.platform == "win32":
    MIC_SETTINGS = "Settings → Privacy & security → Microphone"
else:
    MIC_SETTINGS = "your desktop's Sound settings (and, in a Flatpak or Snap, its microphone permission)"


class AudioUnavailable(Exception):
    """No device, no permission, or no audio system: the message says which and what to do."""


class AudioInput(Protocol):
    name: str

    def start(self, sink: Sink) -> None: ...

    def stop(self) -> None: ...


class AudioOutput(Protocol):
    def play(self, samples: np.ndarray, rate: int, done: Callable[[], None]) -> None: ...

    def stop(self) -> None: ...

    def pause(self, paused: bool) -> None: ...


@dataclass(frozen=True)
class InputDevice:
    index: int
    name: str
    default: bool


def _sounddevice():
    try:
        import sounddevice
    except (ImportError, OSError) as exc:  # OSError: the PortAudio library is missing
        raise AudioUnavailable("no audio system was found (PortAudio): on Debian or Ubuntu, "
                               f"sudo apt install libportaudio2 ({exc})") from None
    return sounddevice


def input_devices() -> list[InputDevice]:
    """The microphones PortAudio sees (empty when none, or no audio system)."""
    try:
        sd = _sounddevice()
        default = sd.default.device[0]
        return [InputDevice(n, d["name"], n == default) for n, d in enumerate(sd.query_devices())
                if d.get("max_input_channels", 0) > 0]
    except AudioUnavailable:
        return []
    except Exception:
        return []


class MicrophoneInput:
    """The system's microphone (or the named device), mono 16 kHz (resampled by PortAudio)."""

    def __init__(self, device: str | None = None) -> None:
        self.device = device
        self.name = device or "default microphone"
        self._stream: Any = None

    def start(self, sink: Sink) -> None:
        sd = _sounddevice()
        if not input_devices():
            raise AudioUnavailable(f"no microphone was found: connect one, or allow Wren to use it in {MIC_SETTINGS}")

        def callback(indata, frames, when, status) -> None:
            sink(np.asarray(indata[:, 0], dtype=np.float32).copy())

        try:
            self._stream = sd.InputStream(samplerate=RATE, channels=1, dtype="float32", blocksize=BLOCK,
                                          device=self.device, callback=callback)
            self._stream.start()
        except Exception as exc:  # PortAudioError: busy, unplugged, permission denied
            self._stream = None
            raise AudioUnavailable(f"the microphone could not be opened ({exc}); check that Wren may use it in "
                                   f"{MIC_SETTINGS}") from None

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
                stream.close()
            except Exception:
                pass  # unplugged mid-recording: it is gone either way


class SpeakerOutput:
    """The system's default output."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._paused = threading.Event()

    def play(self, samples: np.ndarray, rate: int, done: Callable[[], None]) -> None:
        sd = _sounddevice()
        self._stop.clear()
        position = 0

        def callback(outdata, frames, when, status) -> None:
            nonlocal position
            if self._paused.is_set():
                outdata.fill(0)
                return
            chunk = samples[position:position + frames]
            outdata[:len(chunk), 0] = chunk
            outdata[len(chunk):, 0] = 0
            position += len(chunk)
            if position >= len(samples) or self._stop.is_set():
                raise sd.CallbackStop

        try:
            stream = sd.OutputStream(samplerate=rate, channels=1, dtype="float32", callback=callback,
                                     finished_callback=done)
            stream.start()
        except Exception as exc:
            raise AudioUnavailable(f"no speaker or headphones could be opened ({exc})") from None

    def stop(self) -> None:
        self._stop.set()

    def pause(self, paused: bool) -> None:
        (self._paused.set if paused else self._paused.clear)()


class WavFileInput:
    """A WAV file as a microphone: its samples (resampled to 16 kHz, mixed to mono) arrive in
    20 ms blocks at the pace of real time (or `speed` times it), then silence."""

    def __init__(self, path: str, *, speed: float = 1.0, tail_seconds: float = 3.0) -> None:
        self.name = f"file {os.path.basename(path)}"
        with wave.open(path, "rb") as w:
            raw = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
            samples = raw.reshape(-1, w.getnchannels()).mean(axis=1)
            rate = w.getframerate()
        if rate != RATE:
            positions = np.linspace(0, samples.size - 1, round(samples.size * RATE / rate))
            samples = np.interp(positions, np.arange(samples.size), samples).astype(np.float32)
        self.samples = np.concatenate([samples, np.zeros(int(RATE * tail_seconds), dtype=np.float32)])
        self.speed = speed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, sink: Sink) -> None:
        self._stop.clear()

        def run() -> None:
            started = time.monotonic()
            for n, start in enumerate(range(0, self.samples.size, BLOCK)):
                if self._stop.is_set():
                    return
                due = started + n * BLOCK / RATE / self.speed
                time.sleep(max(0.0, due - time.monotonic()))
                sink(self.samples[start:start + BLOCK].copy())

        self._thread = threading.Thread(target=run, name="wren-wav-input", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


class MemoryOutput:
    """An output that keeps what it is asked to play and takes as long as playing would."""

    def __init__(self, *, speed: float = 1.0) -> None:
        self.played: list[tuple[np.ndarray, int]] = []
        self.speed = speed
        self.stopped = threading.Event()
        self._paused = threading.Event()

    def play(self, samples: np.ndarray, rate: int, done: Callable[[], None]) -> None:
        self.stopped.clear()

        def run() -> None:
            played, step = 0, rate // 50
            while played < samples.size and not self.stopped.is_set():
                time.sleep(step / rate / self.speed)
                if not self._paused.is_set():
                    played += step
            self.played.append((samples[:played], rate))
            done()

        threading.Thread(target=run, name="wren-memory-output", daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()

    def pause(self, paused: bool) -> None:
        (self._paused.set if paused else self._paused.clear)()


def default_input(device: str | None = None) -> AudioInput:
    chosen = os.environ.get("WREN_AUDIO_INPUT", "")
    if chosen.startswith("wav:"):
        return WavFileInput(chosen[4:])
    return MicrophoneInput(device)


def default_output() -> AudioOutput:
    return MemoryOutput() if os.environ.get("WREN_AUDIO_OUTPUT") == "memory" else SpeakerOutput()
