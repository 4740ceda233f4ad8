"""Settings → Providers: OpenAI-compatible servers (vLLM, Ollama, OpenAI, another Wren)
whose models appear in the model picker as "provider/model". Keys go to the OS keyring;
where there is none (headless Linux) the page says so and offers an encrypted file with a
passphrase or an environment variable. Keys are never shown again once saved."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.providers.config import ProviderInfo

from ..bridge import Tasks

_STORES = (("OS keyring", "auto"), ("Encrypted file (passphrase)", "file"), ("Environment variable", "env"),
           ("No key", "none"))


class ProvidersPage(QWidget):
    changed = Signal()  # a provider was added or removed: the model picker lists change

    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("providersPage")
        self.engine = engine
        self.tasks = tasks
        self.list = QListWidget()
        self.list.setObjectName("providerList")
        self.list.setAccessibleName("Remote providers")
        self.name_edit = QLineEdit()
        self.name_edit.setObjectName("providerName")
        self.name_edit.setPlaceholderText("e.g. office-gpu")
        self.url_edit = QLineEdit()
        self.url_edit.setObjectName("providerUrl")
        self.url_edit.setPlaceholderText("https://api.example.com/v1")
        self.model_edit = QLineEdit()
        self.model_edit.setObjectName("providerModel")
        self.model_edit.setPlaceholderText("optional: blank lists the server's models")
        self.key_edit = QLineEdit()
        self.key_edit.setObjectName("providerKey")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setAccessibleName("API key (stored in the key store, never shown again)")
        self.store_picker = QComboBox()
        self.store_picker.setObjectName("providerKeyStore")
        for label, value in _STORES:
            self.store_picker.addItem(label, value)
        self.secret_edit = QLineEdit()  # the file's passphrase, or the variable's name
        self.secret_edit.setObjectName("providerKeyDetail")
        self.http_box = QCheckBox("Allow plain http:// to another machine (the key and chats travel unencrypted)")
        self.http_box.setObjectName("providerAllowHttp")
        self.context_spin = QSpinBox()
        self.context_spin.setObjectName("providerContext")
        self.context_spin.setRange(0, 10_000_000)
        self.context_spin.setSpecialValueText("from the server")
        self.add_button = QPushButton("Add provider")
        self.add_button.setObjectName("addProviderButton")
        self.remove_button = QPushButton("Remove")
        self.remove_button.setObjectName("removeProviderButton")
        self.test_button = QPushButton("Test")
        self.test_button.setObjectName("testProviderButton")
        self.keyring_note = QLabel()
        self.keyring_note.setObjectName("keyringNote")
        self.keyring_note.setWordWrap(True)
        self.keyring_note.hide()
        self.status = QLabel()
        self.status.setObjectName("providerStatus")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        form = QFormLayout()
        form.addRow("Name:", self.name_edit)
        form.addRow("Base URL:", self.url_edit)
        form.addRow("Model:", self.model_edit)
        form.addRow("API key:", self.key_edit)
        form.addRow("Keep the key in:", self.store_picker)
        form.addRow("", self.secret_edit)
        form.addRow("Context window:", self.context_spin)
        form.addRow("", self.http_box)
        buttons = QHBoxLayout()
        buttons.addWidget(self.remove_button)
        buttons.addWidget(self.test_button)
        buttons.addStretch(1)
        buttons.addWidget(self.add_button)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Remote models are answered on another computer: what you send leaves this one, "
                                "and the safety policy's \u201cremote\u201d rules apply to it."))
        layout.addWidget(self.list, 1)
        layout.addWidget(self.keyring_note)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        self.store_picker.currentIndexChanged.connect(self._store_changed)
        self.add_button.clicked.connect(lambda: self.tasks.run(self.add(), what="adding the provider"))
        self.remove_button.clicked.connect(lambda: self.tasks.run(self.remove(), what="removing the provider"))
        self.test_button.clicked.connect(lambda: self.tasks.run(self.test(), what="testing the provider"))
        self._store_changed()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.tasks.run(self.load(), what="listing the providers")  # fresh each time the tab opens

    def _store_changed(self) -> None:
        store = self.store_picker.currentData()
        self.secret_edit.setVisible(store in ("file", "env"))
        if store == "file":
            self.secret_edit.setEchoMode(QLineEdit.EchoMode.Password)
            self.secret_edit.setPlaceholderText("passphrase of the encrypted key file (WREN_KEYRING_PASSPHRASE when Wren runs)")
        else:
            self.secret_edit.setEchoMode(QLineEdit.EchoMode.Normal)
            self.secret_edit.setPlaceholderText("variable name, e.g. WREN_KEY_OFFICE_GPU")
        self.key_edit.setEnabled(store not in ("env", "none"))

    async def load(self) -> None:
        problem = self.engine.providers.key_storage_problem()
        # The sentence first; the keyring's own words (a D-Bus error) on a line of their own after it.
        headline, _, details = (problem or "").partition(" Details: ")
        self.keyring_note.setText(headline + (f"\nDetails: {details}" if details else ""))
        self.keyring_note.setVisible(problem is not None)
        if problem is not None and self.store_picker.currentData() == "auto":
            self.store_picker.setCurrentIndex(1)  # the encrypted file, which needs a passphrase
        self._fill(await self.engine.providers.list())

    def _fill(self, providers: list[ProviderInfo], select: str | None = None) -> None:
        chosen = select or self._selected()
        self.list.clear()
        for p in providers:
            models = ", ".join(p.models) or "no models known: Test lists them"
            item = QListWidgetItem(f"{p.name} — {p.base_url} — key: {p.key_store} — {models}")
            item.setData(Qt.ItemDataRole.UserRole, p.name)
            self.list.addItem(item)
            if p.name == chosen:
                self.list.setCurrentItem(item)  # the selection survives a refresh

    def _selected(self) -> str | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    @contextmanager
    def _working(self, text: str) -> Iterator[None]:
        """While the server is asked (seconds): said, and the page's buttons held, so a second
        press does not add or test twice."""
        buttons = (self.add_button, self.remove_button, self.test_button)
        for button in buttons:
            button.setEnabled(False)
        self.status.setText(text)
        try:
            yield
        finally:
            for button in buttons:
                button.setEnabled(True)

    async def add(self) -> ProviderInfo | None:
        with self._working("Adding the provider and asking it for its models…"):
            return await self._add()

    async def _add(self) -> ProviderInfo | None:
        store = self.store_picker.currentData()
        key = self.key_edit.text().strip() or None
        detail = self.secret_edit.text().strip() or None
        model = self.model_edit.text().strip()
        try:
            info = await self.engine.providers.add(
                self.name_edit.text().strip(), self.url_edit.text().strip(), api_key=key,
                models=(model,) if model else (), key_store=store,
                key_env=detail if store == "env" else None, passphrase=detail if store == "file" else None,
                allow_http=self.http_box.isChecked(), context_length=self.context_spin.value() or None)
        except Exception as exc:  # shown on the page: a bad URL, no keyring, a wrong passphrase
            self.status.setText(f"Not added: {exc}")
            return None
        self.key_edit.clear()
        self.secret_edit.clear()
        why = self.engine.providers.discovery_errors.get(info.name)
        self.status.setText(f"Added {info.name}: " + (", ".join(f"{info.name}/{m}" for m in info.models)
                                                       or "no models known yet" + (f" (it could not list them: {why})"
                                                                                   if why else "") + "; press Test"))
        self._fill(await self.engine.providers.list(), select=info.name)  # Test tries the one just added
        self.changed.emit()
        return info

    async def remove(self) -> None:
        name = self._selected()
        if name is None:
            self.status.setText("Choose a provider in the list first.")
            return
        await self.engine.providers.remove(name)
        self.status.setText(f"Removed {name} and its stored key.")
        self._fill(await self.engine.providers.list())
        self.changed.emit()

    async def test(self) -> None:
        name = self._selected()
        if name is None:
            self.status.setText("Choose a provider in the list first.")
            return
        try:
            with self._working(f"Testing {name}…"):
                check = await self.engine.providers.test(name)
        except Exception as exc:
            self.status.setText(f"{name} failed: {exc}")
            return
        answer = f"; it answered {check.answered.strip()!r}" if check.answered is not None else ""
        self.status.setText(f"{name} works: {len(check.models)} model(s){answer} ({check.seconds:.1f} s).")
        self._fill(await self.engine.providers.list())
        self.changed.emit()
