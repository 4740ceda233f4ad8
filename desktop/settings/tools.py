"""Settings → Tools: which tools are switched on, the tools the user always allows (with
Revoke), and MCP servers (add a command or a URL, import the `mcpServers` JSON of other
apps, edit, remove, test the connection and see its tools, read its log). Tool switches are kept by the dialog's Save, like every setting; a server is
saved, removed or imported by its own button, at once; nothing starts a server but Test
(docs/tools.md)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.tools.mcp_facade import McpServerInfo
from wren.engine.tools.registry import ToolInfo

from ..bridge import Tasks
from .tool_labels import tool_label

_KINDS = (("Program on this computer (stdio)", "stdio"), ("URL (streamable HTTP)", "http"))


def parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and # comments are skipped. A line without "=" or with
    a bad name is an error that names the line."""
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or any(c.isspace() for c in key):
            raise ValueError(f"environment line {number} ({line!r}) is not KEY=VALUE")
        env[key] = value
    return env


def _list(name: str, accessible: str, rows: int) -> QListWidget:
    widget = QListWidget()
    widget.setObjectName(name)
    widget.setAccessibleName(accessible)
    widget.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    widget.setTextElideMode(Qt.TextElideMode.ElideRight)
    widget.setMaximumHeight(widget.fontMetrics().lineSpacing() * rows + 16)
    return widget


def _short(text: str, limit: int = 80) -> str:
    """The first sentence of a description, cut to fit one row (the whole is its tooltip)."""
    first = re.split(r"(?<=[a-z0-9)])\.\s+(?=[A-Z])", " ".join(text.split()))[0].rstrip(".")
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _button(text: str, name: str, tip: str = "") -> QPushButton:
    button = QPushButton(text)
    button.setObjectName(name)
    if tip:
        button.setToolTip(tip)
    return button


class ToolsPage(QScrollArea):
    changed = Signal()  # tools were switched on or off, or servers changed: the composer's menu lists change

    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("toolsPage")
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.engine = engine
        self.tasks = tasks
        self._filling = False
        self._pending: dict[str, bool] = {}  # tool switches not saved yet (the dialog's Save keeps them)
        self.servers: list[McpServerInfo] = []

        # -- tools on/off ---------------------------------------------------------------
        self.tool_list = _list("toolList", "Tools: checked ones may be offered to the model", 8)
        self.tool_list.itemChanged.connect(self._tool_toggled)
        tools_box = QGroupBox("Tools")
        box = QVBoxLayout(tools_box)
        note = QLabel("Switched-off tools are never offered to the model. Which tools a chat uses is chosen "
                      "with the Tools button under the message box.")
        note.setWordWrap(True)
        box.addWidget(note)
        box.addWidget(self.tool_list)

        # -- always allowed ---------------------------------------------------------------
        self.always_list = _list("alwaysAllowedList", "Tools that run without asking", 4)
        self.revoke_button = _button("Revoke", "revokeToolButton", "Ask again before each call of this tool")
        self.revoke_button.clicked.connect(lambda: self.tasks.run(self.revoke(), what="revoking the approval"))
        always_box = QGroupBox("Always allowed")
        box = QVBoxLayout(always_box)
        box.addWidget(QLabel("Tools you chose \u201cAlways allow\u201d for run without asking."))
        box.addWidget(self.always_list)
        row = QHBoxLayout()
        row.addWidget(self.revoke_button)
        row.addStretch(1)
        box.addLayout(row)

        # -- MCP servers ------------------------------------------------------------------
        self.server_list = _list("mcpServerList", "MCP servers", 5)
        self.server_list.currentItemChanged.connect(self._server_selected)
        self.name_edit = QLineEdit()
        self.name_edit.setObjectName("mcpName")
        self.name_edit.setPlaceholderText("e.g. files")
        self.kind_picker = QComboBox()
        self.kind_picker.setObjectName("mcpKind")
        for label, value in _KINDS:
            self.kind_picker.addItem(label, value)
        self.kind_picker.currentIndexChanged.connect(self._kind_changed)
        self.command_edit = QLineEdit()
        self.command_edit.setObjectName("mcpCommand")
        self.command_edit.setPlaceholderText("e.g. npx or /usr/bin/python3")
        self.args_edit = QLineEdit()
        self.args_edit.setObjectName("mcpArgs")
        self.args_edit.setPlaceholderText("arguments as on a command line, e.g. -y @modelcontextprotocol/server-filesystem ~/notes")
        self.env_edit = QPlainTextEdit()
        self.env_edit.setObjectName("mcpEnv")
        self.env_edit.setTabChangesFocus(True)
        self.env_edit.setPlaceholderText("KEY=VALUE, one a line")
        self.env_edit.setFixedHeight(self.env_edit.fontMetrics().lineSpacing() * 3 + 14)
        self.url_edit = QLineEdit()
        self.url_edit.setObjectName("mcpUrl")
        self.url_edit.setPlaceholderText("http://127.0.0.1:8000/mcp")
        form = QFormLayout()
        form.addRow("&Name:", self.name_edit)
        form.addRow("&Kind:", self.kind_picker)
        form.addRow("&Command:", self.command_edit)
        form.addRow("&Arguments:", self.args_edit)
        form.addRow("&Environment:", self.env_edit)
        form.addRow("&URL:", self.url_edit)
        self._form = form
        for label, edit in (("Name", self.name_edit), ("Kind", self.kind_picker), ("Command", self.command_edit),
                            ("Arguments", self.args_edit), ("Environment", self.env_edit), ("URL", self.url_edit)):
            edit.setAccessibleName(f"MCP server {label.lower()}")
        self.save_button = _button("Add server", "saveMcpButton", "Add this server, or save changes to the chosen one")
        self.new_button = _button("New", "newMcpButton", "Clear the form to add another server")
        self.remove_button = _button("Remove", "removeMcpButton", "Remove the chosen server")
        self.test_button = _button("Test connection", "testMcpButton", "Start the chosen server and list its tools")
        self.log_button = _button("Show log", "mcpLogButton", "What the chosen server wrote and what Wren did with it")
        self.save_button.clicked.connect(lambda: self.tasks.run(self.save_server(), what="saving the MCP server"))
        self.new_button.clicked.connect(self.new_server)
        self.remove_button.clicked.connect(lambda: self.tasks.run(self.remove_server(), what="removing the MCP server"))
        self.test_button.clicked.connect(lambda: self.tasks.run(self.test_server(), what="testing the MCP server"))
        self.log_button.clicked.connect(lambda: self.tasks.run(self.show_log(), what="reading the MCP server's log"))
        self.name_edit.textChanged.connect(self._name_changed)

        self.import_edit = QPlainTextEdit()
        self.import_edit.setObjectName("mcpImportText")
        self.import_edit.setAccessibleName("mcpServers JSON to import")
        self.import_edit.setTabChangesFocus(True)
        self.import_edit.setPlaceholderText('Paste the "mcpServers" JSON of Claude desktop or another app')
        self.import_edit.setFixedHeight(self.import_edit.fontMetrics().lineSpacing() * 4 + 14)
        self.import_button = _button("Import", "importMcpButton", "Add every server in the pasted JSON")
        self.import_file_button = _button("Import from file…", "importMcpFileButton", "Read the servers from a JSON file")
        self.import_button.clicked.connect(
            lambda: self.tasks.run(self.import_json(self.import_edit.toPlainText()), what="importing MCP servers"))
        self.import_file_button.clicked.connect(self._pick_import_file)

        self.status = QLabel()
        self.status.setObjectName("toolsStatus")
        self.status.setAccessibleName("Tools page status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.output = QPlainTextEdit()
        self.output.setObjectName("mcpOutput")
        self.output.setAccessibleName("The server's tools or log")
        self.output.setReadOnly(True)
        self.output.setTabChangesFocus(True)
        self.output.setMinimumHeight(self.output.fontMetrics().lineSpacing() * 6)
        self.output.hide()

        servers_box = QGroupBox("MCP servers")
        box = QVBoxLayout(servers_box)
        intro = QLabel("Servers start when a chat uses their tools (or on Test) and stop with Wren. "
                       "Their tools always ask before each call unless you always allow them.")
        intro.setWordWrap(True)
        box.addWidget(intro)
        box.addWidget(self.server_list)
        box.addLayout(form)
        row = QHBoxLayout()
        for b in (self.save_button, self.new_button, self.remove_button, self.test_button, self.log_button):
            row.addWidget(b)
        row.addStretch(1)
        box.addLayout(row)
        box.addWidget(self.import_edit)
        row = QHBoxLayout()
        row.addWidget(self.import_button)
        row.addWidget(self.import_file_button)
        row.addStretch(1)
        box.addLayout(row)
        box.addWidget(self.status)
        box.addWidget(self.output)

        content = QWidget()
        layout = QVBoxLayout(content)
        kept = QLabel("Tool switches are kept when you press Save. Servers are saved, removed and "
                      "imported with their own buttons, at once.")
        kept.setWordWrap(True)
        kept.setObjectName("toolsKeptNote")
        layout.addWidget(kept)
        layout.addWidget(tools_box)
        layout.addWidget(always_box)
        layout.addWidget(servers_box)
        layout.addStretch(1)
        self.setWidget(content)
        self._kind_changed()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.tasks.run(self.load(), what="listing the tools")  # fresh each time the tab opens

    # -- loading ------------------------------------------------------------------------

    async def load(self) -> None:
        self._fill_tools(await self.engine.tools.list())
        self._fill_always(await self.engine.tools.always_allowed())
        self._fill_servers(await self.engine.tools.mcp_servers())

    def _fill_tools(self, tools: list[ToolInfo]) -> None:
        self._filling = True
        try:
            self.tool_list.clear()
            for tool in tools:
                where = "built in" if tool.source == "builtin" else f"MCP server {tool.source.removeprefix('mcp:')}"
                asks = " · asks first" if tool.needs_approval else ""
                label = tool_label(tool.name)
                item = QListWidgetItem(f"{label} — {_short(tool.description) or 'no description'} ({where}{asks})")
                item.setData(Qt.ItemDataRole.UserRole, tool.name)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                on = self._pending.get(tool.name, tool.enabled)
                item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)
                item.setToolTip(f"{tool.name}: {tool.description}" if tool.description else tool.name)
                self.tool_list.addItem(item)
        finally:
            self._filling = False

    def _fill_always(self, names: list[str]) -> None:
        self.always_list.clear()
        for name in names:
            item = QListWidgetItem(tool_label(name))
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setToolTip(name)
            self.always_list.addItem(item)
        if not names:
            empty = QListWidgetItem("None: every tool that asks will ask.")
            empty.setFlags(Qt.ItemFlag.NoItemFlags)
            self.always_list.addItem(empty)
        self.revoke_button.setEnabled(bool(names))

    def _fill_servers(self, servers: list[McpServerInfo]) -> None:
        chosen = self._selected_server()
        self.servers = servers
        self.server_list.blockSignals(True)
        try:
            self.server_list.clear()
            for s in servers:
                where = s.url if s.url else " ".join([s.command or "", *s.args])
                state = s.state + (f": {s.error}" if s.error else "") + ("" if s.enabled else " · off")
                item = QListWidgetItem(f"{s.name} — {where} — {state}")
                item.setToolTip(f"{s.name}: {where} ({state})")
                item.setData(Qt.ItemDataRole.UserRole, s.name)
                self.server_list.addItem(item)
                if s.name == chosen:
                    self.server_list.setCurrentItem(item)
        finally:
            self.server_list.blockSignals(False)
        self._name_changed()

    # -- tools --------------------------------------------------------------------------

    def _tool_toggled(self, item: QListWidgetItem) -> None:
        if self._filling:
            return
        name = item.data(Qt.ItemDataRole.UserRole)
        on = item.checkState() == Qt.CheckState.Checked
        self._pending[name] = on
        self.status.setText(f"{tool_label(name)} will be {'on' if on else 'off'} when you press Save.")

    async def save(self) -> None:
        """Keep the tool switches made since the page loaded (the dialog's Save)."""
        pending, self._pending = self._pending, {}
        for name, on in pending.items():
            await self.engine.tools.set_enabled(name, on)
        if pending:
            self.changed.emit()

    async def set_enabled(self, name: str, enabled: bool) -> None:
        await self.engine.tools.set_enabled(name, enabled)
        self.status.setText(f"{tool_label(name)} is {'on' if enabled else 'off'}.")
        self.changed.emit()

    async def revoke(self) -> None:
        item = self.always_list.currentItem() or self.always_list.item(0)
        name = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        if not name:
            return
        await self.engine.tools.revoke_approval(name)
        self.status.setText(f"{tool_label(name)} will ask again before each call.")
        self._fill_always(await self.engine.tools.always_allowed())
        self.always_list.setFocus()

    # -- servers ------------------------------------------------------------------------

    def _selected_server(self) -> str | None:
        item = self.server_list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    def _server(self, name: str | None) -> McpServerInfo | None:
        return next((s for s in self.servers if s.name == name), None)

    def _server_selected(self, *_args) -> None:
        server = self._server(self._selected_server())
        if server is None:
            self._name_changed()
            return
        self.name_edit.setText(server.name)
        self.kind_picker.setCurrentIndex(0 if server.command is not None else 1)
        self.command_edit.setText(server.command or "")
        self.args_edit.setText(shlex.join(server.args))
        self.env_edit.setPlainText("\n".join(f"{k}={v}" for k, v in server.env.items()))
        self.url_edit.setText(server.url or "")
        self.output.hide()
        self._name_changed()

    def new_server(self) -> None:
        self.server_list.setCurrentRow(-1)
        for edit in (self.name_edit, self.command_edit, self.args_edit, self.url_edit):
            edit.clear()
        self.env_edit.clear()
        self.kind_picker.setCurrentIndex(0)
        self.name_edit.setFocus()

    def _kind_changed(self) -> None:
        stdio = self.kind_picker.currentData() == "stdio"
        for edit in (self.command_edit, self.args_edit, self.env_edit):
            edit.setVisible(stdio)
            self._form.labelForField(edit).setVisible(stdio)
        self.url_edit.setVisible(not stdio)
        self._form.labelForField(self.url_edit).setVisible(not stdio)

    def _name_changed(self) -> None:
        exists = self._server(self.name_edit.text().strip()) is not None
        self.save_button.setText("Save changes" if exists else "Add server")
        chosen = self._selected_server() is not None
        for b in (self.remove_button, self.test_button, self.log_button):
            b.setEnabled(chosen)

    async def save_server(self) -> McpServerInfo | None:
        name = self.name_edit.text().strip()
        if not name:
            self.status.setText("Give the server a name first.")
            self.name_edit.setFocus()
            return None
        replace = self._server(name) is not None
        try:
            if self.kind_picker.currentData() == "stdio":
                command = self.command_edit.text().strip()
                if not command:
                    raise ValueError("give the command that starts the server")
                try:
                    args = shlex.split(self.args_edit.text())
                except ValueError as exc:
                    raise ValueError(f"the arguments cannot be read: {exc}") from None
                info = await self.engine.tools.add_mcp_server(name, command=command, args=args,
                                                        env=parse_env(self.env_edit.toPlainText()), replace=replace)
            else:
                url = self.url_edit.text().strip()
                if not url:
                    raise ValueError("give the server's URL")
                info = await self.engine.tools.add_mcp_server(name, url=url, replace=replace)
        except Exception as exc:
            self.status.setText(f"Not saved: {exc}")
            return None
        self.status.setText(f"{'Saved' if replace else 'Added'} {info.name}. It starts when a chat uses its tools, or on Test.")
        self._fill_servers(await self.engine.tools.mcp_servers())
        self._select(info.name)
        self.changed.emit()
        return info

    def _select(self, name: str) -> None:
        for i in range(self.server_list.count()):
            if self.server_list.item(i).data(Qt.ItemDataRole.UserRole) == name:
                self.server_list.setCurrentRow(i)

    async def remove_server(self) -> None:
        name = self._selected_server()
        if name is None:
            self.status.setText("Choose a server in the list first.")
            return
        await self.engine.tools.remove_mcp_server(name)
        self.status.setText(f"Removed {name}.")
        self.output.hide()
        self._fill_servers(await self.engine.tools.mcp_servers())
        self._fill_tools(await self.engine.tools.list())
        self.changed.emit()

    async def test_server(self) -> None:
        name = self._selected_server()
        if name is None:
            self.status.setText("Choose a server in the list first.")
            return
        self.status.setText(f"Starting {name}…")
        self.test_button.setEnabled(False)
        try:
            tools = await self.engine.tools.test_mcp_server(name)
        except Exception as exc:
            self.status.setText(str(exc))
            self.output.setPlainText(await self.engine.tools.mcp_server_log(name))
            self.output.show()
            return
        finally:
            self.test_button.setEnabled(self._selected_server() is not None)
        self.status.setText(f"{name} works: {len(tools)} tool{'s' if len(tools) != 1 else ''}.")
        self.output.setPlainText("\n".join(f"{t.name} — {t.description}" for t in tools) or "(no tools)")
        self.output.show()
        self._fill_servers(await self.engine.tools.mcp_servers())
        self._fill_tools(await self.engine.tools.list())
        self.changed.emit()

    async def show_log(self) -> None:
        name = self._selected_server()
        if name is None:
            self.status.setText("Choose a server in the list first.")
            return
        text = await self.engine.tools.mcp_server_log(name)
        self.output.setPlainText(text or f"{name} has written nothing yet.")
        self.output.show()
        self.output.verticalScrollBar().setValue(self.output.verticalScrollBar().maximum())
        self.status.setText(f"The log of {name}, newest last.")

    def _pick_import_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import MCP servers", "", "JSON (*.json);;All files (*)")
        if path:
            self.tasks.run(self.import_file(Path(path)), what="importing MCP servers")

    async def import_file(self, path: Path) -> list[str]:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.status.setText(f"Could not read {path}: {exc}")
            return []
        return await self.import_json(text)

    async def import_json(self, text: str) -> list[str]:
        if not text.strip():
            self.status.setText("Paste the JSON first (or import a file).")
            return []
        try:
            names = await self.engine.tools.import_mcp_servers(text)
        except Exception as exc:
            said = str(exc)  # the engine's own "nothing was imported; …" is not said twice
            self.status.setText(said[:1].upper() + said[1:] if said.startswith("nothing was imported")
                                else f"Nothing imported: {said}")
            return []
        self.status.setText(f"Imported {len(names)} server{'s' if len(names) != 1 else ''}: {', '.join(names)}.")
        self.import_edit.clear()
        self._fill_servers(await self.engine.tools.mcp_servers())
        self.changed.emit()
        return names
