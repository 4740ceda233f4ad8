"""A tool call inside an answer: a compact card with the tool's name, its arguments and its
result (each expandable), a moving indicator and Cancel while it runs, and Allow once /
Always allow / Deny while it waits for the user (docs/tools.md)."""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
SPIN_MS = 100
DECLINED = "the user declined"
PREVIEW_CHARS = 80  # the one-line summary of arguments or result in the collapsed card
MAX_SHOWN_CHARS = 200_000  # a 10 MB result is not laid out whole: the rest is said to be cut
ERROR_COLOUR = "#d64545"
STYLE = f"""
#toolCard {{ border: 1px solid palette(mid); border-radius: 6px; background: palette(alternate-base); }}
#toolCard[state="approval"] {{ border: 2px solid palette(highlight); }}
#toolCard[state="error"] {{ border: 1px solid {ERROR_COLOUR}; }}
#toolCard[state="error"] #toolState, #toolCard[state="error"] #toolSpinner {{ color: {ERROR_COLOUR}; }}
#toolCard[state="error"] #toolResultText {{ color: {ERROR_COLOUR}; }}
#toolState {{ color: palette(placeholder-text); }}
#toolCard QToolButton {{ color: palette(text); padding: 1px 4px; }}
#toolCard QToolButton:checked {{ background: transparent; }}
#toolCard QToolButton:!focus {{ border: 2px solid transparent; }}
#toolCard QToolButton:focus {{ border: 2px solid palette(highlight); border-radius: 6px; }}
"""


def pretty_json(value: Any) -> str:
    """Arguments as indented JSON, keys in the model's order, non-ASCII kept readable."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _preview(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


def _shown(text: str) -> str:
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    return text[:MAX_SHOWN_CHARS] + f"\n… ({len(text) - MAX_SHOWN_CHARS:,} more characters not shown)"


class _Section(QWidget):
    """A toggle ("▸ Arguments  {…}") over a read-only text that opens and closes."""

    def __init__(self, title: str, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = title
        self.toggle = QToolButton()
        self.toggle.setObjectName(f"{name}Toggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setAccessibleName(f"Show {title.lower()}")
        self.text = QPlainTextEdit()
        self.text.setObjectName(f"{name}Text")
        self.text.setAccessibleName(title)
        self.text.setReadOnly(True)
        self.text.setTabChangesFocus(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.text.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.text.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.text)
        self.toggle.toggled.connect(self.set_expanded)
        self.set_content("")

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def set_content(self, text: str) -> None:
        self.text.setPlainText(_shown(text))
        summary = _preview(text)
        self.toggle.setText(f"{self.title}  {summary}" if summary else self.title)
        self.toggle.setToolTip(f"Show or hide the {self.title.lower()}")
        self._fit()

    def set_expanded(self, expanded: bool) -> None:
        if self.toggle.isChecked() != expanded:
            self.toggle.setChecked(expanded)  # comes back here through toggled
            return
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        self.toggle.setAccessibleName(f"{'Hide' if expanded else 'Show'} {self.title.lower()}")
        self.text.setVisible(expanded)
        self._fit()

    def _fit(self) -> None:
        # Tall enough for a few lines, scrolling past a dozen: a long result never takes the chat.
        lines = min(12, max(1, self.text.document().blockCount()))
        self.text.setFixedHeight(lines * self.text.fontMetrics().lineSpacing() + 14)


class ToolCard(QFrame):
    """One call. `decided(call_id, decision)` answers an approval; `cancel_requested(call_id)`."""

    decided = Signal(str, str)  # call id, "once" | "always" | "deny"
    cancel_requested = Signal(str)

    def __init__(self, call_id: str, name: str, arguments: dict, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("toolCard")
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.state = "running"  # running | approval | done | error
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet(STYLE)
        self.setAccessibleName(f"Tool call: {name}")

        self.title = QLabel(f"Tool · <b>{_escape(name)}</b>")
        self.title.setObjectName("toolCardTitle")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.spinner = QLabel(SPINNER[0])
        self.spinner.setObjectName("toolSpinner")
        self.spinner.setAccessibleName("Running")
        self.state_label = QLabel("running…")
        self.state_label.setObjectName("toolState")
        self.state_label.setAccessibleName("Tool status")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("cancelToolButton")
        self.cancel_button.setAccessibleName(f"Cancel the tool {name}")
        self.cancel_button.setToolTip("Stop this tool; the answer goes on without its result")
        self.cancel_button.clicked.connect(self._cancel)
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.setSpacing(6)
        header.addWidget(self.spinner)
        header.addWidget(self.title)
        header.addWidget(self.state_label, 1)
        header.addWidget(self.cancel_button)

        self.args_section = _Section("Arguments", "toolArguments")
        self.args_section.set_content(pretty_json(arguments))
        self.result_section = _Section("Result", "toolResult")
        self.result_section.hide()

        self.approval = QWidget()
        self.approval.setObjectName("toolApproval")
        self.approval_label = QLabel(f"Wren wants to run <b>{_escape(name)}</b> with the arguments above. Allow it?")
        self.approval_label.setObjectName("toolApprovalQuestion")
        self.approval_label.setWordWrap(True)
        self.allow_once_button = QPushButton("Allow once")
        self.allow_once_button.setObjectName("allowOnceButton")
        self.allow_once_button.setAccessibleName(f"Allow {name} once")
        self.allow_always_button = QPushButton("Always allow this tool")
        self.allow_always_button.setObjectName("allowAlwaysButton")
        self.allow_always_button.setAccessibleName(f"Always allow {name}")
        self.allow_always_button.setToolTip("Later calls of this tool run without asking (Settings → Tools can revoke it)")
        self.deny_button = QPushButton("Deny")
        self.deny_button.setObjectName("denyToolButton")
        self.deny_button.setAccessibleName(f"Deny {name}")
        self.deny_button.setToolTip("The model is told that you declined")
        self.allow_once_button.clicked.connect(lambda: self._decide("once"))
        self.allow_always_button.clicked.connect(lambda: self._decide("always"))
        self.deny_button.clicked.connect(lambda: self._decide("deny"))
        for b in (self.allow_once_button, self.allow_always_button, self.deny_button, self.cancel_button):
            # Room for the focus ring's wider padding: Qt does not re-measure a button on focus.
            b.setMinimumWidth(b.fontMetrics().horizontalAdvance(b.text()) + 32)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.allow_once_button)
        row.addWidget(self.allow_always_button)
        row.addWidget(self.deny_button)
        row.addStretch(1)
        box = QVBoxLayout(self.approval)
        box.setContentsMargins(0, 2, 0, 0)
        box.setSpacing(4)
        box.addWidget(self.approval_label)
        box.addLayout(row)
        self.approval.hide()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.setSpacing(2)
        layout.addLayout(header)
        layout.addWidget(self.args_section)
        layout.addWidget(self.approval)
        layout.addWidget(self.result_section)

        self._frame = 0
        self._timer = QTimer(self)
        self._timer.setInterval(SPIN_MS)
        self._timer.timeout.connect(self._spin)
        self._timer.start()
        self._update_description()

    # -- what the engine says ------------------------------------------------------------

    def ask_approval(self) -> None:
        """The call waits for the user: show the exact arguments and the three choices."""
        if self.state in ("done", "error"):
            return
        self.state = "approval"
        self._timer.stop()
        self.spinner.setText("?")
        self.spinner.setAccessibleName("Waiting for you")
        self.state_label.setText("waiting for your approval")
        self.args_section.set_expanded(True)
        self.approval.show()
        self.cancel_button.hide()
        self._polish()

    def set_result(self, content: str, is_error: bool, duration: float | None = None) -> None:
        self._timer.stop()
        declined = content == DECLINED  # the user's choice, not a failure: not shown as an error
        self.state = "declined" if declined else "error" if is_error else "done"
        self._keep_focus(self.approval, self.cancel_button)
        self.approval.hide()
        self.cancel_button.hide()
        self.spinner.setText("–" if declined else "✕" if is_error else "✓")
        self.spinner.setAccessibleName({"declined": "Declined", "error": "Failed"}.get(self.state, "Done"))
        status = self.state
        if duration is not None and not declined:
            status += f" · {duration:.1f} s" if duration >= 0.1 else f" · {duration * 1000:.0f} ms"
        self.state_label.setText(status)
        self.result_section.title = "Error" if self.state == "error" else "Result"
        self.result_section.text.setAccessibleName(self.result_section.title)
        self.result_section.set_content(content)
        self.result_section.set_expanded(self.result_section.expanded)  # the toggle's name follows the title
        self.result_section.show()
        self._polish()

    @property
    def running(self) -> bool:
        return self.state in ("running", "approval")

    def stop_spinning(self) -> None:
        """The answer ended without this call's result (a replay of an interrupted answer)."""
        if self.running:
            self._timer.stop()
            self.state = "error"
            self.spinner.setText("✕")
            self.state_label.setText("no result")
            self.approval.hide()
            self.cancel_button.hide()
            self._polish()

    # -- internals -----------------------------------------------------------------------

    def _keep_focus(self, *going: QWidget) -> None:
        """Focus on a control about to hide stays in the card (its arguments' toggle)."""
        focused = QApplication.focusWidget()
        if focused is not None and any(w is focused or w.isAncestorOf(focused) for w in going):
            self.args_section.toggle.setFocus(Qt.FocusReason.OtherFocusReason)

    def _decide(self, decision: str) -> None:
        self._keep_focus(self.approval)
        for b in (self.allow_once_button, self.allow_always_button, self.deny_button):
            b.setEnabled(False)
        if decision != "deny":
            self.state = "running"
            self.approval.hide()
            self.cancel_button.show()
            self.state_label.setText("running…")
            self.spinner.setAccessibleName("Running")
            self._timer.start()
        self.decided.emit(self.call_id, decision)
        self._polish()

    def _cancel(self) -> None:
        self.cancel_button.setEnabled(False)
        self.state_label.setText("cancelling…")
        self.cancel_requested.emit(self.call_id)

    def _spin(self) -> None:
        self._frame = (self._frame + 1) % len(SPINNER)
        self.spinner.setText(SPINNER[self._frame])

    def _polish(self) -> None:
        self.setProperty("state", self.state)
        self.style().unpolish(self)
        self.style().polish(self)
        self._update_description()

    def _update_description(self) -> None:
        self.setAccessibleDescription(f"{self.name}: {self.state_label.text()}")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
