"""The server's API key: made once, kept in the OS keyring, never in Wren's data folder.

Where the key lives, in order:
1. `WREN_API_KEY` in the environment: used as is, stored nowhere (for services and
   containers that inject secrets).
2. The desktop keyring through `keyring`: Secret Service (GNOME Keyring, KWallet's
   bridge), macOS Keychain, Windows Credential Locker.
3. Without one (headless Linux), only when the user chooses it: an encrypted file
   (keyrings.alt's EncryptedKeyring, AES with a key derived from a passphrase) outside
   the data folder. The passphrase comes from `WREN_KEYRING_PASSPHRASE` or the terminal.

A plain-text keyring (keyrings.alt's PlaintextKeyring, which `keyring` would otherwise pick
on such a machine) is never used.
"""

from __future__ import annotations

import getpass
import hmac
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path

from ..keystore import PASSPHRASE_ENV, KeyStoreError, backend_name, encrypted_file, os_keyring

SERVICE = "wren-server"
USERNAME = "api-key"
ENV_KEY = "WREN_API_KEY"
ENV_PASSPHRASE = PASSPHRASE_ENV  # the same name the providers' encrypted file reads
KEY_PREFIX = "wren-"
MIN_KEY_CHARS = 24


class KeyStoreUnavailable(KeyStoreError):
    """No safe place to keep the server's key; the message says what the user can do."""


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def same_key(given: str, expected: str) -> bool:
    """Constant-time comparison (the time taken says nothing about how much matched)."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def default_key_file() -> Path:
    """The encrypted key file's place: keyring's own data folder, not Wren's."""
    from keyring.util import platform_

    return Path(platform_.data_root()) / "wren-server-key.cfg"


def system_keyring():
    """The desktop's keyring backend, or None on a machine without one (engine/keystore.py:
    only keyring's OS backends count; keyrings.alt's file stores are never picked)."""
    return os_keyring()[0]


class ServerKeys:
    """Read, make and replace the server's key in one store."""

    def __init__(self, backend=None, *, env_key: str | None = None, where: str = ""):
        self._backend = backend
        self._env_key = env_key
        self.where = where  # for messages: "the Secret Service keyring", "WREN_API_KEY", ...

    @property
    def from_environment(self) -> bool:
        return self._env_key is not None

    def get(self) -> str | None:
        if self._env_key is not None:
            return self._env_key
        return self._backend.get_password(SERVICE, USERNAME)

    def create(self, *, replace: bool = False) -> tuple[str, bool]:
        """The key, made and stored first if there is none (or `replace`); and whether it
        was made now."""
        if self._env_key is not None:
            if replace:
                raise KeyStoreUnavailable(f"the key comes from {ENV_KEY}; change that variable to change it")
            return self._env_key, False
        if not replace:
            current = self.get()
            if current:
                return current, False
        key = new_key()
        self._backend.set_password(SERVICE, USERNAME, key)
        if isinstance(getattr(self._backend, "file_path", None), str):
            os.chmod(self._backend.file_path, 0o600)
        if self.get() != key:
            raise KeyStoreUnavailable(f"{self.where} did not keep the new key")
        return key, True


def open_keys(*, key_file: Path | None = None, use_key_file: bool = False,
              passphrase: Callable[[bool], str] | None = None,
              environ: Mapping[str, str] | None = None) -> ServerKeys:
    """Where the server's key lives on this machine (see the module's docstring).

    `key_file`: the encrypted file's path (default: `default_key_file()`); `use_key_file`:
    the user chose that file (it is also used when it exists already, or when
    WREN_KEYRING_PASSPHRASE is set). `passphrase(new)` asks for the
    passphrase (new: the file does not exist yet, so ask twice); without it, only the
    environment variable gives one."""
    if environ is None:
        environ = os.environ
    env_key = environ.get(ENV_KEY)
    if env_key is not None:
        env_key = env_key.strip()
        if len(env_key) < MIN_KEY_CHARS:
            raise KeyStoreUnavailable(f"{ENV_KEY} holds {len(env_key)} characters; a server key needs at least "
                                      f"{MIN_KEY_CHARS} (make one with: python -c \"import secrets; "
                                      "print(secrets.token_urlsafe(32))\")")
        return ServerKeys(env_key=env_key, where=f"the environment variable {ENV_KEY}")
    path = Path(key_file) if key_file is not None else default_key_file()
    chosen_file = use_key_file or path.exists() or bool(environ.get(ENV_PASSPHRASE))
    if not chosen_file:
        backend = system_keyring()
        if backend is not None:
            return ServerKeys(backend, where=f"the system keyring ({backend_name(backend)})")
    if not chosen_file:
        raise KeyStoreUnavailable(
            "this machine has no desktop keyring (no Secret Service on D-Bus), so the server key has no safe "
            "place by default, and Wren never writes it in plain text. Choose one: run `wren serve --key-file` "
            f"to keep it in an encrypted file ({path}) protected by a passphrase (asked on the terminal, or "
            f"set {ENV_PASSPHRASE}), or set {ENV_KEY} to a key of your own in the server's environment."
        )
    secret = environ.get(ENV_PASSPHRASE)
    if not secret:
        if passphrase is None:
            raise KeyStoreUnavailable(f"the encrypted key file {path} needs a passphrase: set {ENV_PASSPHRASE} "
                                      "or run `wren serve` on a terminal")
        secret = passphrase(not path.exists())
    return ServerKeys(encrypted_file(path, secret, KeyStoreUnavailable), where=f"the encrypted key file {path}")


def ask_passphrase(new: bool) -> str:
    """The passphrase from the terminal (twice for a new file)."""
    first = getpass.getpass("Passphrase for Wren's encrypted key file: ")
    if new:
        if getpass.getpass("The same passphrase again: ") != first:
            raise KeyStoreUnavailable("the two passphrases differ; nothing was saved")
        if len(first) < 8:
            raise KeyStoreUnavailable("a passphrase needs at least 8 characters; nothing was saved")
    return first
