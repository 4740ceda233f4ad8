"""Settings → Safety: every category with its action for the local model and for remote
servers, the user's own block list, and any problem with the user's policy file."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.errors import WrenError
from wren.engine.events import SafetyAction

from .labels import ACTION_HINTS, ACTIONS, category_label, group_label

DESTINATIONS = ("local", "remote")
COLUMNS = ("What", "Category", "Local model", "Remote server")


def _lines(box: QPlainTextEdit) -> list[str]:
    return [line.strip() for line in box.toPlainText().splitlines() if line.strip()]


class SafetyPage(QWidget):
    def __init__(self, engine: Engine, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("safetyPage")
        self.engine = engine
        self.combos: dict[tuple[str, str], QComboBox] = {}
        self._loaded_actions: dict[tuple[str, str], SafetyAction] = {}
        self._loaded_blocklist: tuple[list[str], list[str]] = ([], [])

        self.warnings_label = QLabel()
        self.warnings_label.setObjectName("policyWarnings")
        self.warnings_label.setAccessibleName("Problems with your safety policy file")
        self.warnings_label.setWordWrap(True)
        self.warnings_label.hide()
        intro = QLabel("What Wren does when a message or an answer contains one of these. "
                       + "; ".join(f"{ACTIONS[a]}: {ACTION_HINTS[a]}" for a in SafetyAction) + ".")
        intro.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("safetyRules")
        self.table.setAccessibleName("Safety rules")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.verticalHeader().hide()
        self.table.setColumnHidden(1, True)  # the raw category id: each row's tooltip gives it
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)

        self.words_edit = QPlainTextEdit()
        self.words_edit.setObjectName("blocklistWords")
        self.words_edit.setAccessibleName("Blocked words, one per line")
        self.words_edit.setPlaceholderText("One word or phrase per line")
        self.patterns_edit = QPlainTextEdit()
        self.patterns_edit.setObjectName("blocklistPatterns")
        self.patterns_edit.setAccessibleName("Blocked patterns, one regular expression per line")
        self.patterns_edit.setPlaceholderText(r"One regular expression per line, e.g. \bPRJ-\d{4}\b")
        self.error_label = QLabel()
        self.error_label.setObjectName("safetyError")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        lists = QHBoxLayout()
        for title, box in (("Blocked words", self.words_edit), ("Blocked patterns (regular expressions)", self.patterns_edit)):
            stack = QVBoxLayout()
            stack.addWidget(QLabel(title))
            stack.addWidget(box)
            lists.addLayout(stack)
        layout = QVBoxLayout(self)
        layout.addWidget(self.warnings_label)
        layout.addWidget(intro)
        layout.addWidget(self.table, 3)
        layout.addWidget(QLabel("Your block list (its action is the “your block list” row above):"))
        layout.addLayout(lists, 1)
        layout.addWidget(self.error_label)

    def load(self) -> None:
        warnings = self.engine.policy_warnings
        self.warnings_label.setText(
            "Your safety policy file has a problem, so Wren uses its shipped policy:\n" + "\n".join(warnings)
        )
        self.warnings_label.setVisible(bool(warnings))
        rows = self.engine.safety.rules()
        self.table.setRowCount(len(rows))
        self.combos.clear()
        self._loaded_actions.clear()
        for r, rule in enumerate(rows):
            what = QTableWidgetItem(f"{group_label(rule.category)}: {category_label(rule.category)}")
            what.setToolTip(rule.category)  # the id the policy file and `wren` use, for who needs it
            what.setData(Qt.ItemDataRole.UserRole, rule.category)
            self.table.setItem(r, 0, what)
            self.table.setItem(r, 1, QTableWidgetItem(rule.category))
            for c, destination in enumerate(DESTINATIONS, start=2):
                action = rule.local if destination == "local" else rule.remote
                combo = self._combo(rule.category, destination, action)
                self.table.setItem(r, c, _cell_read_as(combo))
                self.table.setCellWidget(r, c, combo)
                self.combos[(rule.category, destination)] = combo
                self._loaded_actions[(rule.category, destination)] = action
        self.table.resizeRowsToContents()
        # A small file read; the engine's reader, so the page never parses the policy itself.
        self._loaded_blocklist = self.engine.safety.blocklist_now()
        self.words_edit.setPlainText("\n".join(self._loaded_blocklist[0]))
        self.patterns_edit.setPlainText("\n".join(self._loaded_blocklist[1]))

    def _combo(self, category: str, destination: str, action: SafetyAction) -> QComboBox:
        combo = QComboBox()
        combo.setObjectName(f"safetyAction.{destination}")
        where = "the model on this computer" if destination == "local" else "a remote server"
        combo.setAccessibleName(f"{category_label(category)}, sent to {where}")
        for value in SafetyAction:
            combo.addItem(ACTIONS[value], value)
            combo.setItemData(combo.count() - 1, ACTION_HINTS[value], Qt.ItemDataRole.ToolTipRole)
        combo.setCurrentIndex(list(SafetyAction).index(action))
        return combo

    def action(self, category: str, destination: str) -> SafetyAction:
        return self.combos[(category, destination)].currentData()

    def set_action(self, category: str, destination: str, action: SafetyAction) -> None:
        combo = self.combos[(category, destination)]
        combo.setCurrentIndex(combo.findData(action))

    async def save(self) -> bool:
        """Write what changed; a refused change (a bad pattern, a broken policy file) is shown
        here and nothing after it is written. The block list goes first: it is the one the
        user is most likely to get wrong."""
        self.error_label.hide()
        words, patterns = _lines(self.words_edit), _lines(self.patterns_edit)
        changes = [(key, self.action(*key)) for key in self.combos if self.action(*key) != self._loaded_actions[key]]
        try:
            if (words, patterns) != self._loaded_blocklist:
                await self.engine.safety.set_blocklist(words, patterns)
                self._loaded_blocklist = (words, patterns)
            for (category, destination), action in changes:
                await self.engine.safety.set_action(category, destination, action)
                self._loaded_actions[(category, destination)] = action
        except WrenError as exc:
            self.error_label.setText(str(exc))
            self.error_label.show()
            return False
        return True


def _cell_read_as(combo: QComboBox) -> QTableWidgetItem:
    """The cell under a combo box: a screen reader walks the table's cells, not the widgets
    in them, so the cell says what the combo is and its choice (kept up to date)."""
    cell = QTableWidgetItem()

    def say(choice: str) -> None:
        cell.setData(Qt.ItemDataRole.AccessibleTextRole, f"{combo.accessibleName()}: {choice}")

    say(combo.currentText())
    combo.currentTextChanged.connect(say)
    return cell
