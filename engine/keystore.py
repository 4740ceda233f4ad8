"""Where Wren keeps secrets: the one keyring layer under the providers' API keys
(engine/providers/keys.py) and the server's key (engine/server/keys.py).

- The OS keyring: Secret Service (GNOME Keyring, KWallet's bridge) or KWallet on Linux,
  Keychain on macOS, the Windows Credential Locker, through `keyring`. Only those count:
  keyring's own fallback would reach keyrings.alt's plain-text file, which Wren never uses.
  A backend chosen explicitly (PYTHON_KEYRING_BACKEND, keyring's config file) is used when it
  is one of them; otherwise (none chosen, or one that is not an OS store) each is asked
  afresh on every call (a Secret Service may start after Wren did) and they are ranked as
  keyring ranks them. When several answer, a key is
  written to the first and read from the first that has it, so a key kept by an earlier
  choice is still found.
- An encrypted file (keyrings.alt's EncryptedKeyring: PBKDF2 + AES) at a path the caller
  chooses, unlocked with a passphrase given in code, never asked for by keyring itself.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from .errors import WrenError

PASSPHRASE_ENV = "WREN_KEYRING_PASSPHRASE"
# The OS stores: (module, class). Wren recognises a backend by its module.
OS_BACKENDS = (
    ("keyring.backends.macOS", "Keyring"),
    ("keyring.backends.Windows", "WinVaultKeyring"),
    ("keyring.backends.SecretService", "Keyring"),
    ("keyring.backends.libsecret", "Keyring"),
    ("keyring.backends.kwallet", "DBusKeyring"),
)
# keyrings.alt's check that a passphrase opens a file: this entry, encrypted with it.
_REFERENCE = ("keyring-setting", "password reference", "password reference value")


class KeyStoreError(WrenError):
    """A key could not be stored or read; the message says what the user can do."""


def is_os_backend(backend: object) -> bool:
    module = type(backend).__module__
    return any(module == name or module.startswith(name + ".") for name, _ in OS_BACKENDS)


class OsKeyrings:
    """Several OS keyrings answering at once (KWallet beside a Secret Service): writes go to
    the first, a read takes the first that has the key, a delete clears it from all."""

    def __init__(self, backends: list[Any]):
        self.backends = backends

    def get_password(self, service: str, username: str) -> str | None:
        for backend in self.backends:
            value = backend.get_password(service, username)
            if value is not None:
                return value
        return None

    def set_password(self, service: str, username: str, password: str) -> None:
        self.backends[0].set_password(service, username, password)

    def delete_password(self, service: str, username: str) -> None:
        from keyring.errors import PasswordDeleteError

        deleted = False
        for backend in self.backends:
            try:
                backend.delete_password(service, username)
                deleted = True
            except PasswordDeleteError:
                pass
        if not deleted:
            raise PasswordDeleteError(f"no {username!r} in {service!r}")


def backend_name(backend: object) -> str:
    """A short name for messages: "SecretService", "kwallet", ..."""
    first = backend.backends[0] if isinstance(backend, OsKeyrings) else backend
    return type(first).__module__.split(".")[-1]


def os_keyring() -> tuple[Any | None, str | None]:
    """(the OS keyring, None), or (None, why there is none). See the module's docstring."""
    from keyring import core

    configured = core.load_env() or core.load_config()
    if configured is not None:
        members = getattr(configured, "backends", None) or [configured]
        chosen = [b for b in members if is_os_backend(b)]
        if chosen:
            return (chosen[0] if len(chosen) == 1 else OsKeyrings(chosen)), None
    found: list[tuple[float, Any]] = []
    reasons: list[str] = []
    for module_name, class_name in OS_BACKENDS:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
            priority = cls.priority  # raises where this store cannot run
        except Exception as exc:  # ImportError, RuntimeError, D-Bus errors...
            reasons.append(f"{module_name.rsplit('.', 1)[1]}: {exc}")
            continue
        if priority > 0:
            found.append((priority, cls()))
    if not found:
        secret = next((r for r in reasons if r.startswith("SecretService")), None)
        return None, (secret or "; ".join(reasons) or "no keyring backend")
    ranked = [backend for _, backend in sorted(found, key=lambda pair: -pair[0])]  # stable: ties keep order
    return (ranked[0] if len(ranked) == 1 else OsKeyrings(ranked)), None


def explain_keyring_error(exc: BaseException) -> str:
    """What a failure of the OS keyring means for the user, the keyring's own message last
    (a locked Secret Service says "Failed to unlock the collection!", a broken one a D-Bus error)."""
    from keyring.errors import InitError, KeyringLocked

    if isinstance(exc, KeyringLocked):
        what = ("the OS keyring is locked, so Wren cannot read or store keys in it: unlock it (log in to "
                "the desktop again, or unlock the \"Login\" keyring in your passwords app, such as Seahorse) "
                "and try again")
    elif isinstance(exc, InitError):
        what = ("the OS keyring could not be opened (its Secret Service did not answer as expected): "
                "unlock or restart it, or keep the key elsewhere (an encrypted file or an environment variable)")
    else:
        what = "the OS keyring refused the request"
    return f"{what}. Details: {type(exc).__name__}: {exc}"


def encrypted_file(path: Path, passphrase: str, error: type[KeyStoreError] = KeyStoreError):
    """keyrings.alt's EncryptedKeyring at `path`, unlocked with `passphrase`; `error` (a
    KeyStoreError) when it cannot be used or the passphrase does not open the file. The
    file's folder is made private (0700)."""
    try:
        from keyrings.alt.file import EncryptedKeyring  # type: ignore[import-untyped]
        EncryptedKeyring._get_crypto_impl()
    except ImportError as exc:
        raise error(f"the encrypted key file needs keyrings.alt and pycryptodomex ({exc})") from None
    if not passphrase or not passphrase.strip():
        raise error("the passphrase for the encrypted key file is empty")

    class PassphraseFile(EncryptedKeyring):
        """EncryptedKeyring at the given path, unlocked with a given passphrase (not a prompt)."""

        file_path = str(path)

        def _get_new_password(self) -> str:
            return passphrase

        def _unlock(self) -> None:
            self.keyring_key = passphrase
            try:
                ok = self.get_password(*_REFERENCE[:2]) == _REFERENCE[2]
            except Exception:  # a wrong passphrase decrypts to garbage, which fails in many ways
                ok = False
            if not ok:
                self._lock()
                raise error(f"the passphrase does not open {self.file_path}")

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.chmod(path.parent, 0o700)
    except OSError:
        pass
    return PassphraseFile()
