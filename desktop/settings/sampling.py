"""Settings → Generation: each model's sampling preset (temperature, top-k, top-p, min-p,
repetition penalty), each with a line on what it does, and a reset to the model's defaults.

A model with no preset answers with its defaults: Wren's built-in ones overlaid by the
model's own generation_config.json. Only values that differ from those are saved, so a
model left alone keeps following improved defaults.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.inference.presets import PRESET_FIELDS, PRESETS_KEY

from ..theme import HELP_STYLE

# One line each, in plain words: what turning the setting up or down does.
HELP = {
    "temperature": "How adventurous the wording is: lower stays with the likeliest words, higher "
                   "takes more chances; 0 gives the same answer every time.",
    "top_k": "Only the this-many likeliest next words are ever considered; off means no limit.",
    "top_p": "Only the likeliest words that together hold this share of the chance are "
             "considered; 1 means no limit.",
    "min_p": "Drops words less than this fraction as likely as the best one; it keeps small models "
             "from wandering off. 0 turns it off.",
    "repetition_penalty": "Makes words used in the last few sentences less likely, so answers do not "
                          "go round in circles; 1 turns it off.",
}
LABELS = {"temperature": "Temperature", "top_k": "Top k", "top_p": "Top p", "min_p": "Min p",
          "repetition_penalty": "Repetition penalty"}
_DECIMALS = 2


def _spin(minimum: float, maximum: float, step: float, name: str, label: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox(minimum=minimum, maximum=maximum, singleStep=step, decimals=_DECIMALS)
    box.setObjectName(name)
    box.setAccessibleName(label)
    return box


def _shown(value: float | int) -> float | int:
    """A value as its spin box shows it, so a default the box cannot show exactly is not
    mistaken for an edit."""
    return value if isinstance(value, int) else round(float(value), _DECIMALS)


class SamplingPresetEditor(QWidget):
    """Pick a model, edit its preset; `save()` writes every model's edits at once."""

    def __init__(self, engine: Engine, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("samplingPresetEditor")
        self.engine = engine
        self._defaults: dict[str, dict] = {}  # model -> its values without a preset
        self._values: dict[str, dict] = {}  # model -> the values shown (saved preset, then edits)
        self._saved: dict[str, dict] = {}  # the presets as loaded
        self._current: str | None = None
        self.model_picker = QComboBox()
        self.model_picker.setObjectName("samplingModelPicker")
        self.model_picker.setAccessibleName("Model whose sampling settings are shown")
        self.model_picker.currentIndexChanged.connect(lambda _: self._switch(self.model_picker.currentData()))
        self.temperature = _spin(0, 5, 0.05, "temperatureSpin", "Temperature")
        self.top_k = QSpinBox(minimum=0, maximum=100_000)
        self.top_k.setObjectName("topKSpin")
        self.top_k.setAccessibleName("Top k")
        self.top_k.setSpecialValueText("off")
        self.top_p = _spin(0.01, 1, 0.05, "topPSpin", "Top p")
        self.min_p = _spin(0, 0.99, 0.01, "minPSpin", "Min p")
        self.repetition_penalty = _spin(0.01, 5, 0.05, "repetitionPenaltySpin", "Repetition penalty")
        self.boxes = {name: getattr(self, name) for name in PRESET_FIELDS}
        for box in self.boxes.values():
            box.valueChanged.connect(self._update_state)
        self.reset_button = QPushButton("Reset to model defaults")
        self.reset_button.setObjectName("resetSamplingButton")
        self.reset_button.clicked.connect(self.reset)
        self.state = QLabel()
        self.state.setObjectName("samplingPresetState")
        self.state.setWordWrap(True)

        form = QFormLayout()
        form.addRow("Model", self.model_picker)
        for name, box in self.boxes.items():
            hint = QLabel(HELP[name])
            hint.setObjectName(f"{name}Help")
            hint.setWordWrap(True)
            hint.setStyleSheet(HELP_STYLE)
            box.setToolTip(HELP[name])
            form.addRow(LABELS[name], box)
            form.addRow("", hint)
        row = QHBoxLayout()
        row.addWidget(self.state, 1)
        row.addWidget(self.reset_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(form)
        layout.addLayout(row)

    async def load(self, models: list[str], select: str | None) -> None:
        """Read every installed model's defaults and saved preset; show `select`'s."""
        saved = await self.engine.settings.get(PRESETS_KEY) or {}
        self._saved = {name: dict(preset) for name, preset in saved.items() if isinstance(preset, dict)}
        self._defaults.clear()
        self._values.clear()
        for name in models:
            defaults = await self.engine.settings.default_sampling(name, preset=False)
            current = await self.engine.settings.default_sampling(name)
            self._defaults[name] = {f: _shown(getattr(defaults, f)) for f in PRESET_FIELDS}
            self._values[name] = {f: _shown(getattr(current, f)) for f in PRESET_FIELDS}
        self._current = None
        self.model_picker.blockSignals(True)
        self.model_picker.clear()
        for name in models:
            self.model_picker.addItem(name, name)
        self.model_picker.blockSignals(False)
        index = self.model_picker.findData(select) if select else -1
        self.model_picker.setCurrentIndex(max(0, index) if models else -1)
        self._switch(self.model_picker.currentData())

    def select(self, model: str | None) -> None:
        """Show `model`'s preset (as when a model is picked on the Model tab)."""
        index = self.model_picker.findData(model)
        if index >= 0:
            self.model_picker.setCurrentIndex(index)

    def current_model(self) -> str | None:
        return self._current

    def values(self) -> dict:
        return {name: _shown(box.value()) for name, box in self.boxes.items()}

    def reset(self) -> None:
        if self._current is not None:
            self._show(self._defaults[self._current])

    async def save(self) -> None:
        """Write the presets: a model's values that match its defaults are not kept. Raises
        InvalidRequest, naming the model, for a value the engine refuses."""
        self._keep()
        presets = {name: dict(preset) for name, preset in self._saved.items()}
        for name, values in self._values.items():
            preset = {k: v for k, v in presets.get(name, {}).items() if k not in PRESET_FIELDS}
            preset.update({k: v for k, v in values.items() if v != self._defaults[name][k]})
            if preset:
                presets[name] = preset
            else:
                presets.pop(name, None)
        if presets != self._saved:
            await self.engine.settings.set(PRESETS_KEY, presets or None)
            self._saved = presets

    def _keep(self) -> None:
        if self._current is not None:
            self._values[self._current] = self.values()

    def _switch(self, model: str | None) -> None:
        self._keep()
        self._current = model if model in self._values else None
        self.setEnabled(self._current is not None)
        if self._current is not None:
            self._show(self._values[self._current])

    def _show(self, values: dict) -> None:
        for name, box in self.boxes.items():
            box.setValue(values[name])
        self._update_state()

    def _update_state(self) -> None:
        if self._current is None:
            self.state.setText("No model installed.")
            return
        edited = self.values() != self._defaults[self._current]
        self.state.setText("Edited for this model." if edited else "This model's defaults.")
        self.reset_button.setEnabled(edited)
