"""Settings: installed models and import, backend, sampling defaults, system prompt, custom
instructions, memory, safety rules, hotkey, diagnostics.

Everything is read from and saved to the engine's store; the dialog holds no state of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QKeySequenceEdit,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.errors import WrenError
from wren.engine.ghost import ENABLED_KEY as GHOST_ENABLED_KEY
from wren.engine.ghost import TEMPORARY_ENABLED_KEY as GHOST_TEMPORARY_KEY
from wren.engine.inference.sampling import SamplingParams
from wren.engine.inference.select import BACKEND_NAMES
from wren.engine.records import DEFAULT_SYSTEM_PROMPT

from ..bridge import Tasks
from ..memory.page import MemoryPage
from ..safety.page import SafetyPage
from ..theme import HELP_STYLE
from ..window.models import installed_models
from .about import AboutPage
from .diagnostics import DiagnosticsPage
from .importer import import_model
from .pages import SettingsPages
from .personal import PersonalPage
from .privacy import PrivacyPage
from .providers import ProvidersPage
from .sampling import SamplingPresetEditor
from .tools import ToolsPage

HOTKEY = "desktop.hotkey"
HOTKEY_ENABLED = "desktop.hotkey_enabled"


@dataclass(frozen=True)
class SavedSettings:
    model: str | None
    backend: str
    model_changed: bool  # the model or backend differs from what was loaded: reload
    hotkey: str | None  # None: off


def _spin(minimum: float, maximum: float, step: float, decimals: int, name: str, label: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(minimum, maximum)
    box.setSingleStep(step)
    box.setDecimals(decimals)
    box.setObjectName(name)
    box.setAccessibleName(label)
    return box


def _scrolling(page: QWidget) -> QScrollArea:
    """A page taller than a small screen scrolls instead of squeezing its rows."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    # Not a Tab stop of its own: Shift+Tab from the page's first field goes back to the
    # sidebar; the area still scrolls to whichever field has focus.
    area.setFocusPolicy(Qt.FocusPolicy.NoFocus)
    area.setWidget(page)
    return area


class SettingsDialog(QDialog):
    saved = Signal(object)  # SavedSettings
    models_requested = Signal()  # open the Models page (download, delete, default)
    models_changed = Signal()  # a model was imported: the window's model picker lists it at once

    def __init__(self, engine: Engine, tasks: Tasks, *, hotkey_problem: str | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Wren settings")
        self.setAccessibleName("Settings")
        self.engine = engine
        self.tasks = tasks
        self._loaded_model: str | None = None
        self._saved_prompt: str | None = None
        self._loaded_backend = "auto"
        self._performance = None  # as loaded; a change reloads the model
        self._keep_alive_minutes = 5  # as loaded
        self.personal_page = PersonalPage(engine)
        self.memory_page = MemoryPage(engine, tasks)
        self.safety_page = SafetyPage(engine)
        self.diagnostics_page = DiagnosticsPage(engine, tasks)
        self.pages = SettingsPages()  # a sidebar list of the pages, and the page shown
        self._model_page = self._model_tab()
        self.pages.add_page(self._model_page, "Model")
        self._generation_page = _scrolling(self._generation_tab())
        self.pages.add_page(self._generation_page, "Generation")
        self.pages.add_page(self.personal_page, "Personalization")
        self.pages.add_page(self.memory_page, "Memory")
        self.pages.add_page(self.safety_page, "Safety")
        self.tools_page = ToolsPage(engine, tasks)  # loads itself when shown; its switches are kept on Save
        self.pages.add_page(self.tools_page, "Tools")
        self.providers_page = ProvidersPage(engine, tasks)  # loads itself when shown
        self.providers_page.changed.connect(self.models_changed)  # its models join the window's picker at once
        self.pages.add_page(self.providers_page, "Providers")
        self.pages.add_page(self._quick_tab(hotkey_problem), "Quick prompt")
        self.privacy_page = PrivacyPage(engine, tasks)  # export and erase act at once (erase asks first)
        self.pages.add_page(self.privacy_page, "Privacy")
        self.pages.add_page(self.diagnostics_page, "Diagnostics")
        self.about_page = AboutPage(engine)
        self.pages.add_page(self.about_page, "About")
        self.error_label = QLabel()
        self.error_label.setObjectName("settingsError")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #d64545")
        self.error_label.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(lambda: self.tasks.run(self.save(), what="saving settings"))
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.pages, 1)
        layout.addWidget(self.error_label)
        # One rule for every page: a setting is kept on Save and dropped on Cancel, so trying
        # values (sampling, a backend that reloads the model) costs nothing until Save. What a
        # button names as an action (import, add or delete, export, erase, the offline lock)
        # is done when pressed, as its label says.
        self.save_note = QLabel(
            "Save keeps the settings on every page, tool switches included; Cancel leaves every page as it was. "
            "Buttons that name an action — importing a model, adding or deleting a memory, a server or a "
            "provider, exporting, erasing, the offline lock — act when you press them.")
        self.save_note.setObjectName("settingsSaveNote")
        self.save_note.setWordWrap(True)
        layout.addWidget(self.save_note)
        layout.addWidget(self.buttons)
        self.resize(880, 620)  # the sidebar (150 px) beside pages laid out for ~720

    # -- pages ----------------------------------------------------------------------

    def _model_tab(self) -> QWidget:
        self.model_list = QListWidget()
        self.model_list.setObjectName("settingsModelPicker")
        self.model_list.setAccessibleName("Installed models")
        self.import_gguf_button = QPushButton("Import GGUF file…")
        self.import_gguf_button.setObjectName("importGgufButton")
        self.import_folder_button = QPushButton("Import model folder…")
        self.import_folder_button.setObjectName("importFolderButton")
        self.manage_models_button = QPushButton("Manage models…")
        self.manage_models_button.setObjectName("manageModelsButton")
        self.manage_models_button.setAccessibleName("Open the Models page to download or delete models")
        self.manage_models_button.clicked.connect(self.models_requested.emit)
        self.import_progress = QProgressBar()
        self.import_progress.setObjectName("importProgress")
        self.import_progress.setAccessibleName("Import progress")
        self.import_progress.hide()
        self.import_status = QLabel()
        self.import_status.setObjectName("importStatus")
        self.import_status.setWordWrap(True)
        self.backend_picker = QComboBox()
        self.backend_picker.setObjectName("backendPicker")
        self.backend_picker.setAccessibleName("Backend")
        self.backend_picker.addItems(list(BACKEND_NAMES))
        self.import_gguf_button.clicked.connect(self._pick_gguf)
        self.import_folder_button.clicked.connect(self._pick_folder)
        buttons = QHBoxLayout()
        buttons.addWidget(self.import_gguf_button)
        buttons.addWidget(self.import_folder_button)
        buttons.addStretch(1)
        buttons.addWidget(self.manage_models_button)
        self.parallel_spin = QSpinBox(minimum=1, maximum=8)
        self.parallel_spin.setObjectName("parallelSpin")
        self.parallel_spin.setAccessibleName("Answers written at the same time")
        self.prefix_cache_spin = QSpinBox(minimum=0, maximum=65_536,
                                          singleStep=128, suffix=" MB")
        self.prefix_cache_spin.setObjectName("prefixCacheSpin")
        self.prefix_cache_spin.setAccessibleName("Memory for keeping other chats ready")
        speed_hint = QLabel(
            "Answers at the same time: how many answers Wren writes at once — your chat, plus "
            "titles, summaries and quick prompts in the background. More keeps those from "
            "waiting, but each one sets aside as much memory as a full chat needs.\n"
            "Keep other chats ready: memory for what the model has already read of your other "
            "chats, so going back to one answers sooner. 0 turns it off.\n"
            "Both take effect the next time the model loads.")
        speed_hint.setObjectName("speedHint")
        speed_hint.setWordWrap(True)
        # `wren ask` in a terminal: how long its engine keeps the model loaded (engine/resident.py)
        self.keep_alive_spin = QSpinBox(minimum=0, maximum=24 * 60, suffix=" min")
        self.keep_alive_spin.setObjectName("keepAliveSpin")
        self.keep_alive_spin.setSpecialValueText("Off")
        self.keep_alive_spin.setAccessibleName("Keep the model loaded for wren ask, in minutes")
        keep_alive_hint = QLabel(
            "After a “wren ask” in a terminal, the model stays loaded this long, so the next "
            "question answers in under a second. Off loads it for each question and leaves "
            "nothing running. While this window is open, it answers “wren ask” itself for the "
            "model it has loaded.")
        keep_alive_hint.setObjectName("keepAliveHint")
        keep_alive_hint.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Backend", self.backend_picker)
        form.addRow("Answers at the same time", self.parallel_spin)
        form.addRow("Keep other chats ready", self.prefix_cache_spin)
        form.addRow("", speed_hint)
        form.addRow("Keep loaded for the terminal", self.keep_alive_spin)
        form.addRow("", keep_alive_hint)
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.addWidget(QLabel("Installed models (the selected one answers):"))
        layout.addWidget(self.model_list, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.import_progress)
        layout.addWidget(self.import_status)
        layout.addLayout(form)
        return page

    def _generation_tab(self) -> QWidget:
        self.sampling_editor = SamplingPresetEditor(self.engine)
        editor = self.sampling_editor
        self.temperature, self.top_p, self.top_k = editor.temperature, editor.top_p, editor.top_k
        self.min_p, self.repetition_penalty = editor.min_p, editor.repetition_penalty
        # Picking a model on the Model tab shows its preset here.
        self.model_list.currentItemChanged.connect(lambda *_: editor.select(self.selected_model()))
        self.max_tokens = QSpinBox(minimum=1, maximum=1_000_000)
        self.max_tokens.setObjectName("maxTokensSpin")
        self.max_tokens.setAccessibleName("Maximum answer length in tokens")
        self.seed = QLineEdit()
        self.seed.setObjectName("seedEdit")
        self.seed.setAccessibleName("Seed")
        self.seed.setPlaceholderText("random")
        self.stop_strings = QLineEdit()
        self.stop_strings.setObjectName("stopStringsEdit")
        self.stop_strings.setAccessibleName("Stop strings")
        self.stop_strings.setPlaceholderText("none; separate several with |")
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("systemPromptEdit")
        self.system_prompt.setAccessibleName("Default system prompt")
        self.system_prompt.setPlaceholderText("No system prompt")
        reset = QPushButton("Restore defaults")
        reset.setObjectName("restoreDefaultsButton")
        reset.clicked.connect(lambda: self._show_general_sampling(SamplingParams()))
        form = QFormLayout()
        for label, box, hint in (
            ("Longest answer", self.max_tokens,
             "The most an answer may run to, in tokens (a token is about three quarters of a word)."),
            ("Seed", self.seed,
             "A number makes the same question give the same answer again; empty picks a new one each time."),
            ("Stop strings", self.stop_strings,
             "The answer ends as soon as the model writes one of these (separate several with |)."),
        ):
            note = QLabel(hint)
            note.setObjectName(f"{box.objectName()}Help")
            note.setWordWrap(True)
            note.setStyleSheet(HELP_STYLE)
            box.setToolTip(hint)
            form.addRow(label, box)
            form.addRow("", note)
        form.addRow("", reset)
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.addWidget(QLabel("How each model picks its words (a conversation's own settings win):"))
        layout.addWidget(self.sampling_editor)
        layout.addWidget(QLabel("For every model:"))
        layout.addLayout(form)
        layout.addWidget(QLabel("Default system prompt:"))
        layout.addWidget(self.system_prompt, 1)
        # Ghost text (desktop.composer.ghost): suggestions for the user's own draft.
        self.ghost_text = QCheckBox("Suggest how my message goes on while I type (Right arrow or End accepts)")
        self.ghost_text.setObjectName("ghostTextCheck")
        self.ghost_text_temporary = QCheckBox("Also in temporary chats")
        self.ghost_text_temporary.setObjectName("ghostTextTemporaryCheck")
        self.ghost_text.toggled.connect(self.ghost_text_temporary.setEnabled)
        layout.addWidget(self.ghost_text)
        layout.addWidget(self.ghost_text_temporary)
        return page

    def _quick_tab(self, problem: str | None) -> QWidget:
        self.hotkey_enabled = QCheckBox("Open the quick prompt with a global shortcut")
        self.hotkey_enabled.setObjectName("hotkeyEnabled")
        self.hotkey_edit = QKeySequenceEdit()
        self.hotkey_edit.setObjectName("hotkeyEdit")
        self.hotkey_edit.setAccessibleName("Global shortcut")
        self.hotkey_edit.setMaximumSequenceLength(1)
        self.hotkey_status = QLabel(problem or "")
        self.hotkey_status.setObjectName("hotkeyStatus")
        self.hotkey_status.setWordWrap(True)
        self.hotkey_enabled.toggled.connect(self.hotkey_edit.setEnabled)
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.addWidget(self.hotkey_enabled)
        layout.addWidget(self.hotkey_edit)
        layout.addWidget(self.hotkey_status)
        layout.addWidget(QLabel("From a terminal or a desktop shortcut, “wren-desktop --quick” opens it too."))
        layout.addStretch(1)
        return page

    # -- load and save --------------------------------------------------------------

    async def load(self, *, hotkey_default: str) -> None:
        e = self.engine
        self._loaded_model = (e.models.current.name if e.models.current else None) or await e.settings.get("model")
        self._loaded_backend = await e.settings.get("backend", "auto") or "auto"
        await self.refresh_models(select=self._loaded_model)
        index = self.backend_picker.findText(self._loaded_backend)
        self.backend_picker.setCurrentIndex(max(0, index))
        self._show_general_sampling(await e.settings.default_sampling())
        await self.sampling_editor.load([m.name for m in await installed_models(e)], self._loaded_model)
        self._performance = performance = await e.settings.performance()
        self.parallel_spin.setValue(performance.parallel_sequences)
        self.prefix_cache_spin.setValue(performance.prefix_cache_mb)
        self._keep_alive_minutes = round(await e.settings.terminal_keep_alive() / 60)
        self.keep_alive_spin.setValue(self._keep_alive_minutes)
        self._saved_prompt = await e.settings.get("system_prompt")
        self.system_prompt.setPlainText(DEFAULT_SYSTEM_PROMPT if self._saved_prompt is None else self._saved_prompt)
        self.hotkey_enabled.setChecked(bool(await e.settings.get(HOTKEY_ENABLED, True)))
        self.ghost_text.setChecked(await e.settings.get(GHOST_ENABLED_KEY, True) is not False)
        self.ghost_text_temporary.setChecked(await e.settings.get(GHOST_TEMPORARY_KEY, True) is not False)
        self.ghost_text_temporary.setEnabled(self.ghost_text.isChecked())
        self.hotkey_edit.setKeySequence(QKeySequence(await e.settings.get(HOTKEY, hotkey_default) or hotkey_default))
        self.hotkey_edit.setEnabled(self.hotkey_enabled.isChecked())
        await self.personal_page.load()
        await self.memory_page.load()
        self.safety_page.load()
        self.diagnostics_page.load()
        await self.about_page.load()

    async def show_memory(self, memory_id: int) -> bool:
        """Open on the Memory page with one memory selected (from an answer or a notice)."""
        self.pages.setCurrentWidget(self.memory_page)
        return await self.memory_page.show_memory(memory_id)

    async def refresh_models(self, select: str | None = None) -> None:
        models = await installed_models(self.engine)
        self.model_list.clear()
        for info in models:
            size = f"{info.size_bytes / 1e6:,.0f} MB" if info.size_bytes else ""
            details = " · ".join(x for x in (info.architecture, info.quantization, size) if x)
            item = QListWidgetItem(f"{info.name}    {details}")
            item.setData(Qt.ItemDataRole.UserRole, info.name)
            item.setToolTip(str(info.path))
            self.model_list.addItem(item)
            if info.name == select:
                self.model_list.setCurrentItem(item)

    def selected_model(self) -> str | None:
        item = self.model_list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    def _show_general_sampling(self, params: SamplingParams) -> None:
        self.max_tokens.setValue(params.max_tokens)
        self.seed.setText("" if params.seed is None else str(params.seed))
        self.stop_strings.setText(" | ".join(params.stop))

    def general_sampling(self) -> dict:
        """The sampling settings every model shares (length, seed, stop strings), checked."""
        seed = self.seed.text().strip()
        if seed and not seed.isdigit():
            raise WrenError(f"the seed must be a whole number, or empty for random; got {seed!r}")
        stops = [s.strip() for s in self.stop_strings.text().split("|") if s.strip()]
        values = {"max_tokens": self.max_tokens.value(), "seed": int(seed) if seed else None, "stop": stops}
        SamplingParams(**values)
        return values

    def _refuse(self, text: str, page: QWidget) -> None:
        self.error_label.setText(text)
        self.error_label.setVisible(bool(text))
        self.pages.setCurrentWidget(page)

    async def save(self) -> SavedSettings | None:
        # Whatever the engine may refuse goes first; a refusal stops here and shows its page.
        try:
            general = self.general_sampling()
        except WrenError as exc:
            self._refuse(str(exc), self._generation_page)
            return None
        if not await self.safety_page.save():
            self._refuse("A safety setting was not saved; see the Safety page.", self.safety_page)
            return None
        try:
            await self.personal_page.save()
        except WrenError as exc:
            self._refuse(str(exc), self.personal_page)
            return None
        try:
            await self.sampling_editor.save()
            # Other fields saved there by an earlier Wren keep applying to every model.
            everywhere = await self.engine.settings.get("sampling") or {}
            await self.engine.settings.set("sampling", {**everywhere, **general})
        except WrenError as exc:
            self._refuse(str(exc), self._generation_page)
            return None
        try:
            performance = await self.engine.settings.set_performance(
                parallel_sequences=self.parallel_spin.value(), prefix_cache_mb=self.prefix_cache_spin.value())
        except WrenError as exc:
            self._refuse(str(exc), self._model_page)
            return None
        if self.keep_alive_spin.value() != self._keep_alive_minutes:  # an untouched odd value (90 s) stays
            await self.engine.settings.set_terminal_keep_alive(self.keep_alive_spin.value() * 60)
        await self.memory_page.save()
        await self.tools_page.save()
        model, backend = self.selected_model(), self.backend_picker.currentText()
        prompt = self.system_prompt.toPlainText().strip()
        # Unset means "Wren's default", which may improve in a later version; keep it unset
        # unless the user changed it. An empty prompt is a real choice: no system prompt.
        if not (self._saved_prompt is None and prompt == DEFAULT_SYSTEM_PROMPT):
            await self.engine.settings.set("system_prompt", prompt)
        if model:
            await self.engine.settings.set("model", model)
        await self.engine.settings.set("backend", backend)
        hotkey = self.hotkey_edit.keySequence().toString(QKeySequence.SequenceFormat.PortableText) or None
        await self.engine.settings.set(HOTKEY_ENABLED, self.hotkey_enabled.isChecked())
        await self.engine.settings.set(GHOST_ENABLED_KEY, self.ghost_text.isChecked())
        await self.engine.settings.set(GHOST_TEMPORARY_KEY, self.ghost_text_temporary.isChecked())
        if hotkey:
            await self.engine.settings.set(HOTKEY, hotkey)
        result = SavedSettings(
            model=model, backend=backend,
            model_changed=(model is not None and model != self._loaded_model) or backend != self._loaded_backend
            or performance != self._performance,
            hotkey=hotkey if self.hotkey_enabled.isChecked() else None,
        )
        self.saved.emit(result)
        self.accept()
        return result

    # -- import ---------------------------------------------------------------------

    def _pick_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf)")
        if path:
            self.start_import(Path(path))

    def _pick_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Import a model folder (config.json, *.safetensors, tokenizer.json)", str(Path.home()))
        if path:
            self.start_import(Path(path))

    def start_import(self, path: Path) -> None:
        self.tasks.run(self.import_from(path), what="importing the model")

    async def import_from(self, path: Path):
        for b in (self.import_gguf_button, self.import_folder_button):
            b.setEnabled(False)
        self.import_progress.setRange(0, 0)
        self.import_progress.show()
        self.import_status.setText(f"Importing {path.name}…")
        try:
            info = await import_model(self.engine, path, self._progress)
        except Exception as exc:
            self.import_status.setText(f"Could not import {path}: {exc}")
            return None
        finally:
            self.import_progress.hide()
            for b in (self.import_gguf_button, self.import_folder_button):
                b.setEnabled(True)
        self.import_status.setText(
            f"Imported “{info.name}”: it is in the window's model picker now. "
            "To make it the default, select it here and press Save.")
        await self.refresh_models(select=info.name)
        self.models_changed.emit()
        return info

    def _progress(self, done: int, total: int) -> None:
        if total > 0:
            self.import_progress.setRange(0, 1000)
            self.import_progress.setValue(int(1000 * min(done, total) / total))
