"""The user's voice choices in the Voice menu, each saved as a setting: the microphone (the
devices PortAudio lists; a saved one that is gone falls back to the default, with a notice),
the speech recognizer and the voice (the starters and the models Wren offers; one not yet
installed is downloaded first, off the GUI thread, with its progress in the status bar), and
"keep my dictated audio" (off by default: the transcript is the message, the sound is dropped)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu

from .devices import InputDevice, input_devices

# the engine's setting keys (engine/voice/service.py), as plain strings: the window reads them through engine.settings
STT_SETTING, VOICE_SETTING = "voice.stt_model", "voice.voice"
INPUT_SETTING, KEEP_AUDIO_SETTING = "voice.input_device", "voice.keep_audio"
HEADPHONES_SETTING = "voice.headphones"  # False: speakers, and barge-in listens with the echo guard
STT_KIND, VOICE_KIND = "speech-to-text", "voice"
DEFAULT_MIC = "System default"


class VoiceChoices(QObject):
    notice = Signal(str)  # something the user should read (a fallback, a download's end or failure)
    progress = Signal(str, int, int)  # a voice model's download: its id, bytes done, bytes in all
    installed = Signal(object)  # a downloaded voice model (then chosen)

    def __init__(self, window: Any, voice: Any, menu: QMenu, *,
                 devices: Callable[[], list[InputDevice]] = input_devices) -> None:
        super().__init__(window)
        self.window: Any = window
        self.voice = voice  # engine.voice
        self.list_devices = devices
        self.saved_device: str | None = None
        self.keep_audio = False
        self.downloading: str | None = None
        self._cancel = threading.Event()
        self.mic_menu = menu.addMenu("&Microphone")
        self.mic_menu.aboutToShow.connect(self._fill_microphones)
        self.stt_menu = menu.addMenu("Speech &recognizer")
        self.stt_menu.aboutToShow.connect(lambda: self._fill_models(self.stt_menu, STT_KIND))
        self.voice_menu = menu.addMenu("Reading &voice")
        self.voice_menu.aboutToShow.connect(lambda: self._fill_models(self.voice_menu, VOICE_KIND))
        self.keep_action = QAction("&Keep my dictated audio with the chat", self, checkable=True)
        self.keep_action.setObjectName("keepAudioAction")
        self.keep_action.setToolTip("Off: only the words are kept. On: each dictated question's sound is saved "
                                    "with its chat on this computer and deleted with it.")
        self.keep_action.toggled.connect(self.set_keep_audio)
        menu.addAction(self.keep_action)
        self.headphones = True
        self.headphones_action = QAction("I use &headphones (Wren cannot hear itself)", self, checkable=True,
                                         checked=True)
        self.headphones_action.setObjectName("headphonesAction")
        self.headphones_action.setToolTip("Off: Wren's voice comes from speakers, so in voice mode only speech clearly "
                                          "louder than it interrupts Wren (a quiet voice may not).")
        self.headphones_action.toggled.connect(self.set_headphones)
        menu.addAction(self.headphones_action)
        self.progress.connect(self._show_progress)
        self.installed.connect(self.choose_model)  # emitted on the download's thread: queued to this one

    # -- settings ------------------------------------------------------------------------

    async def load(self) -> None:
        """Apply the saved choices (at start)."""
        get = self.window.engine.settings.get
        self.saved_device = await get(INPUT_SETTING)
        self.keep_action.blockSignals(True)
        self.keep_audio = bool(await get(KEEP_AUDIO_SETTING, False))
        self.keep_action.setChecked(self.keep_audio)
        self.keep_action.blockSignals(False)
        self.headphones = bool(await get(HEADPHONES_SETTING, True))
        self.headphones_action.blockSignals(True)
        self.headphones_action.setChecked(self.headphones)
        self.headphones_action.blockSignals(False)
        stt, voice = await get(STT_SETTING), await get(VOICE_SETTING)
        try:
            self.voice.choose(stt=stt, voice=voice)
        except Exception as exc:  # a removed model: the starters, said once
            self.voice.choose()
            self.notice.emit(f"Voice: {exc}; using the starter models.")

    def _save(self, key: str, value: Any) -> None:
        self.window.tasks.run(self.window.engine.settings.set(key, value), what="saving a voice setting")

    def set_keep_audio(self, on: bool) -> None:
        self.keep_audio = on
        self._save(KEEP_AUDIO_SETTING, on)

    def set_headphones(self, on: bool) -> None:
        self.headphones = on
        self._save(HEADPHONES_SETTING, on)

    # -- the microphone --------------------------------------------------------------------

    def device(self) -> str | None:
        """The microphone to open: the saved one if it is connected, else the default (None),
        with a notice."""
        if self.saved_device is None:
            return None
        if any(d.name == self.saved_device for d in self.list_devices()):
            return self.saved_device
        self.notice.emit(f"The microphone “{self.saved_device}” is not connected; using the system's default.")
        return None

    def choose_device(self, name: str | None) -> None:
        self.saved_device = name
        self._save(INPUT_SETTING, name)

    def _fill_microphones(self) -> None:
        menu = self.mic_menu
        menu.clear()
        group = QActionGroup(menu)
        names: list[str | None] = [None, *(d.name for d in self.list_devices())]
        if self.saved_device is not None and self.saved_device not in names:
            names.append(self.saved_device)
        for name in names:
            label = DEFAULT_MIC if name is None else name
            if name is not None and name == self.saved_device and name not in [d.name for d in self.list_devices()]:
                label += " (not connected)"
            action = QAction(label, menu, checkable=True, checked=name == self.saved_device)
            action.triggered.connect(lambda _on=False, n=name: self.choose_device(n))
            group.addAction(action)
            menu.addAction(action)

    # -- the recognizer and the voice ------------------------------------------------------

    def _fill_models(self, menu: QMenu, kind: str) -> None:
        menu.clear()
        group = QActionGroup(menu)
        current = self.voice.stt_model if kind == STT_KIND else self.voice.voice_model
        for model in self.voice.offered(kind):
            chosen = (current or "") == ("" if model.starter else model.id)
            size = "" if model.installed else f" — download {model.size_bytes / 1e6:,.0f} MB, {model.license}"
            action = QAction(f"{model.name}{size}", menu, checkable=True, checked=chosen)
            action.setToolTip(model.notes)
            action.triggered.connect(lambda _on=False, m=model: self.choose_model(m))
            group.addAction(action)
            menu.addAction(action)

    def choose_model(self, model: Any) -> None:
        if not model.installed:
            self.download(model)
            return
        key = STT_SETTING if model.kind == STT_KIND else VOICE_SETTING
        value = None if model.starter else model.id
        if model.kind == STT_KIND:
            self.voice.choose(stt=value, voice=self.voice.voice_model)
        else:
            self.voice.choose(stt=self.voice.stt_model, voice=value)
        self._save(key, value)
        self.notice.emit(f"Voice: using {model.name}.")

    def download(self, model: Any) -> None:
        """Fetch a voice model on a worker thread; chosen once installed."""
        if self.downloading is not None:
            self.notice.emit(f"{self.downloading} is still downloading.")
            return
        self.downloading = model.id
        self._cancel.clear()

        def work() -> None:
            try:
                installed = self.voice.pull(model.id, progress=lambda d, t: self.progress.emit(model.id, d, t),
                                            cancel=self._cancel)
            except Exception as exc:
                self.downloading = None
                self.notice.emit(f"Downloading {model.name} stopped: {exc}")
                return
            self.downloading = None
            self.installed.emit(installed)

        self.notice.emit(f"Downloading {model.name} ({model.size_bytes / 1e6:,.0f} MB)…")
        threading.Thread(target=work, name="wren-voice-model-pull", daemon=True).start()

    def _show_progress(self, model_id: str, done: int, total: int) -> None:
        percent = 100 * done // total if total else 0
        self.window.statusBar().showMessage(f"Downloading {model_id}: {percent}% of {total / 1e6:,.0f} MB", 5000)

    def close(self) -> None:
        self._cancel.set()
