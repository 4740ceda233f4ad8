"""This chat's own settings, from the header: its system prompt, a sampling preset, the
tools it may use, whether it uses and saves memories, and (for a thinking model that takes
it) how much the model thinks. Saved in the conversation
(`engine.conversations.update_settings`); the next Send of this chat follows them. A new,
empty chat takes them too: they are kept by the window until its first message makes the
chat, which is created with them (`engine.conversations.new_chat_settings`)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.ghost import CHAT_SAMPLING_PRESETS, CHAT_SETTING_KEYS

from .seams import OpenChat, StatusLine, TaskRunner

DEFAULT_PRESET = "Model defaults"
CUSTOM_PRESET = "Custom (kept as it is)"
THINKING_DEFAULT = "The model's default"
ALWAYS_THINKS = "Always (this model cannot be told not to think)"
ALWAYS_THINKS_WHY = "This model's chat template has no switch for thinking: it thinks before every answer"
THINKING_LABELS = {"on": "On", "off": "Off", "low": "Low effort", "medium": "Medium effort", "high": "High effort"}


class ChatSettingsDialog(QDialog):
    saved = Signal(dict)  # the chat's settings after saving

    def __init__(self, engine: Engine, conversation_id: int | None, parent: QWidget | None = None, *,
                 pending: dict | None = None, temporary: bool = False):
        """`conversation_id` None: the new chat not made yet, whose settings so far are
        `pending` (`temporary`: it will be a temporary chat)."""
        super().__init__(parent)
        self.setObjectName("chatSettingsDialog")
        self.setWindowTitle("Chat settings")
        self.setAccessibleName("Chat settings")
        self.engine = engine
        self.conversation_id = conversation_id
        self._pending = dict(pending or {})
        self._temporary = temporary
        self._current: dict = {}
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("chatSystemPrompt")
        self.system_prompt.setAccessibleName("System prompt for this chat")
        self.system_prompt.setPlaceholderText("Empty: the system prompt from Settings, else the model's own")
        self.system_prompt.setTabChangesFocus(True)
        self.preset = QComboBox()
        self.preset.setObjectName("chatSamplingPreset")
        self.preset.setAccessibleName("Sampling preset for this chat")
        for name, values in CHAT_SAMPLING_PRESETS.items():
            self.preset.addItem(name, values)
            if values:
                self.preset.setItemData(self.preset.count() - 1, ", ".join(f"{k} {v}" for k, v in values.items()),
                                        Qt.ItemDataRole.ToolTipRole)
        self.memory = QCheckBox("Use and save memories in this chat")
        self.memory.setObjectName("chatMemory")
        self.thinking = QComboBox()  # shown where the loaded model takes a thinking choice
        self.thinking.setObjectName("chatThinking")
        self.thinking.setAccessibleName("Thinking in this chat")
        self.thinking.setToolTip("Whether (or how much) a thinking model thinks before it answers in this chat")
        self.thinking_label = QLabel("Thinking")
        self.thinking_label.setBuddy(self.thinking)  # what a reader says the combo box is (Linux reads only its choice)
        self.tools_box = QGroupBox("Tools this chat may use")
        self.tools_box.setObjectName("chatTools")
        self.tools_default = QCheckBox("The tools chosen in Settings")
        self.tools_default.setObjectName("chatToolsDefault")
        self.tools_default.toggled.connect(self._tools_default_toggled)
        self.tool_boxes: dict[str, QCheckBox] = {}
        self._tools_layout = QVBoxLayout(self.tools_box)
        self._tools_layout.addWidget(self.tools_default)
        self.note = QLabel("")
        self.note.setObjectName("chatSettingsNote")
        self.note.setWordWrap(True)
        form = QFormLayout()
        form.addRow("System prompt", self.system_prompt)
        form.addRow("Sampling", self.preset)
        form.addRow("", self.memory)
        form.addRow(self.thinking_label, self.thinking)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.tools_box)
        layout.addWidget(self.note)
        layout.addWidget(self.buttons)
        self.resize(520, 480)

    async def load(self) -> None:
        engine = self.engine
        if self.conversation_id is None:
            current = {key: self._pending.get(key) for key in (*CHAT_SETTING_KEYS, "tools")}
            temporary = self._temporary
        else:
            current = await engine.conversations.settings(self.conversation_id)
            temporary = bool((await engine.conversations.get(self.conversation_id)).settings.get("temporary"))
        self._current = current
        self.system_prompt.setPlainText(current.get("system_prompt") or "")
        name = current.get("sampling_preset")
        sampling = current.get("sampling")
        index = self.preset.findText(name) if isinstance(name, str) else -1
        if index < 0:
            index = 0 if not sampling else self._custom_index()
        self.preset.setCurrentIndex(index)
        self.memory.setChecked(current.get("memory") is not False and not temporary)
        self.memory.setEnabled(not temporary)
        if temporary:
            self.memory.setToolTip("A temporary chat never uses or saves memories")
        chosen = current.get("tools")
        for info in await engine.tools.list():
            box = QCheckBox(info.name)
            box.setObjectName(f"chatTool_{info.name}")
            box.setToolTip(info.description)
            box.setChecked(chosen is not None and info.name in chosen)
            if not info.enabled:
                box.setToolTip(f"{info.description}\n(switched off in Settings → Tools)")
            self.tool_boxes[info.name] = box
            self._tools_layout.addWidget(box)
        self.tools_default.setChecked(chosen is None)
        self._tools_default_toggled(chosen is None)
        self._load_thinking(current.get("thinking"))

    def _load_thinking(self, saved: object) -> None:
        """The loaded model's thinking choices (engine.models.thinking()); hidden for a model
        that takes none. A saved choice it does not take is kept, and named."""
        support = self.engine.models.thinking()
        choices = support.choices if support is not None else ()
        self.thinking.clear()
        self.thinking.addItem(THINKING_DEFAULT, None)
        for choice in choices:
            self.thinking.addItem(THINKING_LABELS.get(choice, choice), choice)
        if isinstance(saved, str) and saved not in choices:
            self.thinking.addItem(f"{THINKING_LABELS.get(saved, saved)} (not taken by this model)", saved)
        index = self.thinking.findData(saved) if saved is not None else 0
        self.thinking.setCurrentIndex(max(0, index))
        # A model that thinks but whose template has no switch (the DeepSeek-R1 distills):
        # the control is shown, off, and says why, rather than offering a choice it ignores.
        fixed = support is not None and support.thinks and not choices and not isinstance(saved, str)
        if fixed:
            self.thinking.setItemText(0, ALWAYS_THINKS)
            self.thinking.setToolTip(ALWAYS_THINKS_WHY)
        self.thinking.setEnabled(not fixed)
        shown = bool(choices) or isinstance(saved, str) or fixed
        self.thinking.setVisible(shown)
        self.thinking_label.setVisible(shown)

    def _custom_index(self) -> int:
        index = self.preset.findText(CUSTOM_PRESET)
        if index < 0:
            self.preset.addItem(CUSTOM_PRESET, None)
            index = self.preset.count() - 1
        return index

    def _tools_default_toggled(self, on: bool) -> None:
        for box in self.tool_boxes.values():
            box.setEnabled(not on)

    def changes(self) -> dict:
        """What Save writes: every chat setting the panel shows."""
        out: dict = {"system_prompt": self.system_prompt.toPlainText().strip() or None,
                     "memory": None if self.memory.isChecked() else False}
        name = self.preset.currentText()
        if name != CUSTOM_PRESET:  # a custom sampling (set elsewhere) is kept as it is
            values = CHAT_SAMPLING_PRESETS.get(name)
            out["sampling"] = dict(values) if values else None
            out["sampling_preset"] = name if values else None
        out["tools"] = None if self.tools_default.isChecked() else [
            name for name, box in self.tool_boxes.items() if box.isChecked()]
        if self.thinking.isVisibleTo(self) and self.thinking.isEnabled():  # else the chat's choice stays
            out["thinking"] = self.thinking.currentData()
        return out

    async def save(self) -> dict:
        if self.conversation_id is None:  # checked now, kept by the window until the chat is made
            result = self.engine.conversations.new_chat_settings(**self.changes())
        else:
            result = await self.engine.conversations.update_settings(self.conversation_id, **self.changes())
        self._current = result
        self.saved.emit(result)
        return result


async def open_chat_settings(engine: Engine, conversations: OpenChat, status: StatusLine, tasks: TaskRunner,
                             parent: QWidget) -> ChatSettingsDialog | None:
    """The header's Chat settings, for the open chat, or the new one before its first
    message. Save writes (or, for the new chat, keeps for its first message) and closes; the
    composer's tool menu then shows the chat's new choice. Its collaborators are the seams
    of desktop/window/seams.py; the dialog opens over `parent`."""
    conversation_id = conversations.current_id
    new = conversation_id is None
    dialog = ChatSettingsDialog(engine, conversation_id, parent, pending=conversations.new_chat_settings if new else None,
                                temporary=conversations.temporary)
    await dialog.load()
    opened = conversations.opening()

    async def save() -> None:
        result = await dialog.save()
        dialog.accept()
        if new and conversations.current_id is None and conversations.opening() == opened:  # the same new chat
            await conversations.set_new_chat_settings(result)
            status.showMessage("This new chat starts with these settings when you send its first message.", 5000)
        elif not new and conversations.current_id == conversation_id:
            conversations.load_tools()

    dialog.buttons.accepted.connect(lambda: tasks.run(save(), what="saving the chat settings"))
    dialog.open()
    return dialog
