"""The context inspector: "What the model saw" for one answer — every part of the prompt,
whether it went in whole, through the running summary or not at all, and the exact text."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from wren.engine.context.report import ContextPart, ContextReport, PartKind, PartState

from .tokens import TokenPanel

KIND_LABELS = {
    PartKind.SYSTEM: "System prompt",
    PartKind.ABOUT_ME: "About you",
    PartKind.HOW_TO_RESPOND: "How to respond",
    PartKind.MEMORY: "Memory",
    PartKind.PAST_CHAT: "Past chat",
    PartKind.SUMMARY: "Summary of older turns",
    PartKind.HISTORY: "Older messages",
    PartKind.TURN: "Message",
    PartKind.NEW_MESSAGE: "Your new message",
    PartKind.ATTACHMENT: "Attached file",
    PartKind.THINKING: "Earlier thinking",
    PartKind.TOOLS: "Tools",
}
STATE_LABELS = {
    PartState.INCLUDED: "included",
    PartState.SUMMARIZED: "summarized",
    PartState.DROPPED: "dropped",
}
LEFT_OUT = "left out"  # an earlier answer's thinking: never sent back, by design (not for room)
COLUMNS = ("Part", "State", "Tokens", "Source", "Notes")
PREVIEW_CHARS = 200


def part_label(part: ContextPart) -> str:
    label = KIND_LABELS.get(part.kind, part.kind.value)
    if part.kind is PartKind.HISTORY and part.items != 1:
        return f"{label} ({part.items:,})"
    if part.kind is PartKind.ATTACHMENT and part.text:
        return f"{label}: {part.text}"
    if part.kind is PartKind.TOOLS and part.items != 1:
        return f"{label} ({part.items:,})"
    if part.role and part.kind is PartKind.TURN:
        return f"{label} ({'you' if part.role == 'user' else 'Wren'})"
    return label


def part_state(part: ContextPart) -> str:
    if part.kind is PartKind.THINKING:
        return LEFT_OUT
    return STATE_LABELS.get(part.state, part.state.value)


def part_source(part: ContextPart) -> str:
    if not part.source_ids:
        return ""
    noun = {PartKind.MEMORY: "memory", PartKind.PAST_CHAT: "message"}.get(part.kind, "message")
    if part.kind is PartKind.HISTORY and len(part.source_ids) == 2:
        return f"messages {part.source_ids[0]}–{part.source_ids[1]}"
    return ", ".join(f"{noun} {i}" for i in part.source_ids)


def part_notes(part: ContextPart) -> str:
    text = " ".join(part.text.split())
    if len(text) > PREVIEW_CHARS:
        text = text[:PREVIEW_CHARS] + "…"
    return " · ".join(x for x in (part.note, f"“{text}”" if text else "") if x)


def summary_line(report: ContextReport) -> str:
    counted = "exact count" if report.exact else "estimated"
    share = 100 * report.prompt_tokens / report.budget if report.budget > 0 else 0
    return (
        f"The prompt took {report.prompt_tokens:,} of the {report.budget:,} tokens it may use ({share:.0f}%, {counted}); "
        f"the model's window is {report.window:,} tokens and {report.reserve:,} were kept for the answer."
    )


def breakdown_line(report: ContextReport) -> str:
    labels = {k.value: KIND_LABELS[k].lower() for k in KIND_LABELS}
    parts = [f"{labels.get(kind, kind)} {tokens:,}" for kind, tokens in report.tokens_by_kind().items()]
    left_out = [p for p in report.parts if p.state is not PartState.INCLUDED]
    line = "Included tokens: " + ", ".join(parts) if parts else "Nothing was included."
    if left_out:
        line += f". {len(left_out)} part{'s' if len(left_out) != 1 else ''} left out or summarized."
    if report.summarize_calls:
        line += f" Extending the summary took {report.summarize_calls} model call{'s' if report.summarize_calls != 1 else ''}."
    return line


class ContextInspector(QDialog):
    """Read-only; opened with `open()` beside the chat so both stay usable."""

    def __init__(self, report: ContextReport | None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("contextInspector")
        self.setWindowTitle("What the model saw")
        self.setAccessibleName("What the model saw")
        self.report = report
        self.summary_label = QLabel()
        self.summary_label.setObjectName("contextSummary")
        self.summary_label.setWordWrap(True)
        self.breakdown_label = QLabel()
        self.breakdown_label.setObjectName("contextBreakdown")
        self.breakdown_label.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("contextParts")
        self.table.setAccessibleName("Parts of the prompt")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(True)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.prompt_view = QPlainTextEdit()
        self.prompt_view.setObjectName("renderedPrompt")
        self.prompt_view.setAccessibleName("The exact prompt")
        self.prompt_view.setReadOnly(True)
        self.prompt_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.prompt_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.copy_button = QPushButton("Copy prompt")
        self.copy_button.setObjectName("copyPromptButton")
        self.copy_button.setAccessibleName("Copy the exact prompt")
        self.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.prompt_view.toPlainText()))

        prompt_page = QWidget()
        prompt_layout = QVBoxLayout(prompt_page)
        prompt_layout.addWidget(QLabel("Every token the model read (tool definitions and files included):"))
        prompt_layout.addWidget(self.prompt_view, 1)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.copy_button)
        prompt_layout.addLayout(row)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("contextTabs")
        self.tabs.addTab(self.table, "Parts")
        self.tabs.addTab(prompt_page, "Exact prompt")
        self.token_panel = TokenPanel()  # the message itself as tokens: load_tokens fills it
        self.token_panel.setObjectName("messageTokens")
        self.tabs.addTab(self.token_panel, "Tokens")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary_label)
        layout.addWidget(self.breakdown_label)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(buttons)
        self.resize(820, 560)
        self._show(report)

    def _show(self, report: ContextReport | None) -> None:
        if report is None:
            self.summary_label.setText(
                "Wren kept no record of the prompt for this answer (it was written before Wren began keeping one)."
            )
            self.breakdown_label.hide()
            for index in (0, 1):  # the message's own tokens can still be shown
                self.tabs.setTabEnabled(index, False)
            self.tabs.setCurrentWidget(self.token_panel)
            return
        self.summary_label.setText(summary_line(report))
        self.breakdown_label.setText(breakdown_line(report))
        self.table.setRowCount(len(report.parts))
        for row, part in enumerate(report.parts):
            cells = (part_label(part), part_state(part), f"{part.tokens:,}", part_source(part), part_notes(part))
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column == 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if part.text:
                    item.setToolTip(part.text[:2000])
                self.table.setItem(row, column, item)
        self.table.resizeRowsToContents()
        self.prompt_view.setPlainText(report.rendered_prompt or "(the prompt text was not kept)")

    def rows(self) -> list[tuple[str, ...]]:
        """The table as text, top to bottom (what a screen reader or a test reads)."""
        return [
            tuple(item.text() if (item := self.table.item(r, c)) is not None else "" for c in range(self.table.columnCount()))
            for r in range(self.table.rowCount())
        ]

    async def load_tokens(self, engine, message_id: int) -> list:
        """Fill the Tokens tab with this message as the model's tokens."""
        message = await engine.conversations.message(message_id)
        return await self.token_panel.show_text(engine, message.content)
