"""Read-aloud: an answer's sentences spoken as soon as each is complete, while the rest still
streams in. One thread turns sentences into speech, another plays them in order, so the next
sentence is ready when the last one ends. stop(), pause() and the pace (engine.voice's speed)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from .devices import AudioOutput, AudioUnavailable, default_output

_END = None


class ReadAloud(QObject):
    speaking = Signal(bool)
    first_audio = Signal(float)  # seconds from the first sentence being complete to its sound starting
    failed = Signal(str)

    def __init__(self, voice: Any, *, output_factory: Callable[[], AudioOutput] = default_output,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.voice = voice  # engine.voice
        self.output_factory = output_factory
        self.speed = 1.0
        self._stream: Any = None
        self._sentences: queue.Queue = queue.Queue()
        self._generation = 0
        self._output: AudioOutput | None = None
        self._lock = threading.Lock()
        self.active = False

    def speak(self, text: str) -> None:
        """Read a whole text (a finished message)."""
        self.begin()
        self.feed(text)
        self.end()

    def begin(self) -> None:
        """A new answer is about to stream: anything still being read stops."""
        self.stop()
        with self._lock:
            self._generation += 1
            generation = self._generation
            self._stream = self.voice.sentence_stream()
            self._sentences = queue.Queue()
            self._output = self.output_factory()
        self.active = True
        self.speaking.emit(True)
        threading.Thread(target=self._run, args=(generation, self._sentences, self._output),
                         name="wren-read-aloud", daemon=True).start()

    def feed(self, delta: str) -> None:
        if self._stream is None:
            return
        for sentence in self._stream.feed(delta):
            self._sentences.put((sentence, time.perf_counter()))

    def end(self) -> None:
        if self._stream is None:
            return
        for sentence in self._stream.finish():
            self._sentences.put((sentence, time.perf_counter()))
        self._sentences.put(_END)
        self._stream = None

    def stop(self) -> None:
        with self._lock:
            self._generation += 1
            output, self._output = self._output, None
            self._stream = None
            self._sentences.put(_END)
        if output is not None:
            output.stop()
        if self.active:
            self.active = False
            self.speaking.emit(False)

    def pause(self, paused: bool) -> None:
        if self._output is not None:
            self._output.pause(paused)

    def _current(self, generation: int) -> bool:
        return generation == self._generation

    def _run(self, generation: int, sentences: queue.Queue, output: AudioOutput) -> None:
        first = True
        try:
            voice = self.voice.voice()
            while self._current(generation):
                item = sentences.get()
                if item is _END:
                    break
                sentence, complete_at = item
                audio = voice.sentence(sentence, speed=self.speed)
                if audio.size == 0 or not self._current(generation):
                    continue
                done = threading.Event()
                output.play(audio, voice.sample_rate, done.set)
                if first:
                    self.first_audio.emit(time.perf_counter() - complete_at)
                    first = False
                while not done.wait(0.05):
                    if not self._current(generation):
                        output.stop()
                        done.wait(1.0)
                        break
        except AudioUnavailable as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # a phonemizer or voice problem: said, not raised on a thread
            self.failed.emit(f"reading aloud stopped: {exc}")
        finally:
            if self._current(generation):  # ended by itself (stop() says so itself)
                self.active = False
                self.speaking.emit(False)
