"""Sound in and out for `wren chat --voice` (the window has its own device layer, on Qt's
side: desktop/voice/devices.py). The microphone is PortAudio's through `sounddevice`;
WREN_AUDIO_INPUT=wav:PATH makes a WAV file the microphone (its sound at the pace of real
time, then the end of input), WREN_AUDIO_INPUT=none a computer without one;
WREN_AUDIO_OUTPUT=memory plays nothing and only counts what would have been played."""

from __future__ import annotations

import os
import queue
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import WrenError
from .audio import RATE, load_audio

BLOCK = 320  # 20 ms
SILENT_DEVICE_SECONDS = 2.0  # a microphone that sends nothing this long was unplugged

if sys.platform == "darwin":
    MIC_SETTINGS = "System Settings → Privacy & Security → Microphone"
elif sys.platform == "win32":
    MIC_SETTINGS = "Settings → Privacy & security → Microphone"
else:
    MIC_SETTINGS = "your desktop's Sound settings"


class NoMicrophone(WrenError):
    """No microphone, no permission, or no audio system; the message says which and what to do."""


class FileMicrophone:
    """A WAV file as the microphone: 20 ms blocks at the pace of real time, then EOFError."""

    def __init__(self, path: str, *, tail_seconds: float = 1.5) -> None:
        self.name = f"file {os.path.basename(path)}"
        sound = load_audio(path)
        self._samples = np.concatenate([sound, np.zeros(int(RATE * tail_seconds), dtype=np.float32)])
        self._at = 0

    def blocks(self) -> Iterator[np.ndarray]:
        started = time.monotonic() - self._at / RATE
        while self._at < self._samples.size:
            time.sleep(max(0.0, started + self._at / RATE - time.monotonic()))
            block = self._samples[self._at:self._at + BLOCK]
            self._at += BLOCK
            yield block
        raise EOFError

    def close(self) -> None:
        pass


class SystemMicrophone:
    """The default microphone, mono 16 kHz, read while `blocks()` is iterated."""

    def __init__(self) -> None:
        sd = _sounddevice()
        try:
            if not any(d.get("max_input_channels", 0) > 0 for d in sd.query_devices()):
                raise NoMicrophone(f"no microphone was found: connect one, or allow Wren to use it in {MIC_SETTINGS}")
        except NoMicrophone:
            raise
        except Exception as exc:
            raise NoMicrophone(f"the audio system could not list microphones ({exc})") from None
        self.name = "default microphone"
        self._queue: queue.Queue = queue.Queue()
        try:
            self._stream: Any = sd.InputStream(samplerate=RATE, channels=1, dtype="float32", blocksize=BLOCK,
                                               callback=lambda data, *_: self._queue.put(data[:, 0].copy()))
            self._stream.start()
        except Exception as exc:
            raise NoMicrophone(f"the microphone could not be opened ({exc}); check that Wren may use it in "
                               f"{MIC_SETTINGS}") from None

    def blocks(self) -> Iterator[np.ndarray]:
        while True:
            try:
                yield self._queue.get(timeout=SILENT_DEVICE_SECONDS)
            except queue.Empty:
                raise NoMicrophone("the microphone stopped sending sound (was it unplugged?)") from None

    def close(self) -> None:
        try:
            self._stream.stop()
            self._stream.close()
        except Exception:
            pass


def _sounddevice():
    try:
        import sounddevice
    except (ImportError, OSError) as exc:  # OSError: the PortAudio library is missing
        raise NoMicrophone("no audio system was found (PortAudio): on Debian or Ubuntu, "
                           f"sudo apt install libportaudio2 ({exc})") from None
    return sounddevice


def open_microphone() -> FileMicrophone | SystemMicrophone:
    chosen = os.environ.get("WREN_AUDIO_INPUT", "")
    if chosen.startswith("wav:"):
        return FileMicrophone(chosen[4:])
    if chosen == "none":
        raise NoMicrophone(f"no microphone was found: connect one, or allow Wren to use it in {MIC_SETTINGS}")
    return SystemMicrophone()


class Speaker:
    """Plays speech and returns when it has been played (WREN_AUDIO_OUTPUT=memory: counts it)."""

    def __init__(self) -> None:
        self.memory = os.environ.get("WREN_AUDIO_OUTPUT") == "memory"
        self.played_seconds = 0.0

    def play(self, samples: np.ndarray, rate: int) -> None:
        self.played_seconds += samples.size / rate
        if not self.memory:
            from .playback import play

            play(samples, rate)
