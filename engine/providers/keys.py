"""Where providers' API keys live: never in the database, a settings file or a log.

- "system": the OS keyring (Secret Service on Linux, Keychain on macOS, the Windows
  Credential Locker), through `keyring`. Only those real stores count: keyring's own
  fallback chain would reach keyrings.alt's plain-text file, which Wren never uses.
- "file": an encrypted file (keyrings.alt's EncryptedKeyring: PBKDF2 + AES) under the
  data folder, unlocked with a passphrase given when it is used (the WREN_KEYRING_PASSPHRASE
  environment variable, or asked by the CLI). For headless Linux, where no Secret Service
  runs.
- "env": the key is read from an environment variable when needed; Wren stores nothing.
- "none": the server wants no key (a local llama.cpp or vLLM, say).
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import paths
from ..keystore import PASSPHRASE_ENV, KeyStoreError, encrypted_file, explain_keyring_error, os_keyring

__all__ = ["KEY_STORES", "PASSPHRASE_ENV", "KeyStoreError", "delete_key", "env_name", "explain_keyring_error",
           "key_file_path", "keyring_status", "passphrase_from_env", "read_key", "resolve_store", "save_key",
           "system_keyring"]

SERVICE = "wren-providers"
KEY_STORES = ("auto", "system", "file", "env", "none")
_OLD_PASSPHRASE_ENV = "WREN_KEYS_PASSPHRASE"  # this build's first name for it, still read


def passphrase_from_env() -> str | None:
    """The encrypted key file's passphrase from the environment, if set."""
    return os.environ.get(PASSPHRASE_ENV) or os.environ.get(_OLD_PASSPHRASE_ENV)


KEY_FILE = "provider-keys.cfg"

# The sentence a person reads first; the keyring's own words (a D-Bus error) come last.
NO_OS_KEYRING = (
    "No OS keyring is available here, as on a headless Linux machine without a Secret "
    "Service. Keep the key in an encrypted file with a passphrase (key store \"file\"; Wren "
    "reads the passphrase from " + PASSPHRASE_ENV + " when it runs), or in an environment "
    "variable (key store \"env\"). Wren never writes keys as plain text. Details: {reason}"
)


def system_keyring():
    """(the OS keyring backend, None) or (None, why there is none), looked up afresh on each
    call (engine/keystore.py)."""
    return os_keyring()


def _keyring_failure(exc: Exception, doing: str) -> KeyStoreError:
    """A KeyStoreError for a keyring call that failed: the human reason first."""
    if type(exc).__module__.startswith("keyring."):
        return KeyStoreError(f"could not {doing}: {explain_keyring_error(exc)}")
    return KeyStoreError(f"could not {doing}: {exc}")


def keyring_status() -> str | None:
    """None when the OS keyring works; else the sentence to show the user."""
    backend, reason = system_keyring()
    return None if backend is not None else NO_OS_KEYRING.format(reason=reason)


def resolve_store(choice: str) -> str:
    """"auto" becomes "system" where an OS keyring runs, else KeyStoreError saying what
    to choose instead; other choices are checked."""
    if choice not in KEY_STORES:
        raise KeyStoreError(f"unknown key store {choice!r}; choose one of {', '.join(KEY_STORES)}")
    if choice in ("auto", "system"):
        status = keyring_status()
        if status is not None:
            raise KeyStoreError(status)
        return "system"
    return choice


def key_file_path() -> Path:
    return paths.data_dir() / "keys" / KEY_FILE


def _file_keyring(passphrase: str | None):
    passphrase = passphrase if passphrase is not None else passphrase_from_env()
    if not passphrase:
        raise KeyStoreError(f"the encrypted key file needs its passphrase: set {PASSPHRASE_ENV}")
    return encrypted_file(key_file_path(), passphrase)


def _backend(store: str, passphrase: str | None):
    if store == "system":
        backend, reason = system_keyring()
        if backend is None:
            raise KeyStoreError(NO_OS_KEYRING.format(reason=reason))
        return backend
    if store == "file":
        return _file_keyring(passphrase)
    raise KeyStoreError(f"the {store!r} key store keeps no keys")


def save_key(provider: str, key: str, store: str, *, passphrase: str | None = None) -> None:
    if not key:
        raise KeyStoreError("the key is empty")
    try:
        _backend(store, passphrase).set_password(SERVICE, provider, key)
    except KeyStoreError:
        raise
    except Exception as exc:
        raise _keyring_failure(exc, f"store the key for {provider!r} in the {store} key store") from None


def read_key(provider: str, store: str, *, env: str | None = None, passphrase: str | None = None) -> str | None:
    """The key, or None for a provider without one; KeyStoreError when it should exist
    but cannot be read."""
    if store == "none":
        return None
    if store == "env":
        name = env or env_name(provider)
        value = os.environ.get(name)
        if not value:
            raise KeyStoreError(f"the key for provider {provider!r} is to come from ${name}, which is not set")
        return value
    try:
        value = _backend(store, passphrase).get_password(SERVICE, provider)
    except KeyStoreError:
        raise
    except Exception as exc:
        raise _keyring_failure(exc, f"read the key for {provider!r} from the {store} key store") from None
    if value is None:
        raise KeyStoreError(f"no key for provider {provider!r} in the {store} key store; add the provider again")
    return value


def delete_key(provider: str, store: str, *, passphrase: str | None = None) -> None:
    if store not in ("system", "file"):
        return
    try:
        _backend(store, passphrase).delete_password(SERVICE, provider)
    except KeyStoreError:
        raise
    except Exception:  # already gone
        pass


def env_name(provider: str) -> str:
    """The default environment variable for a provider's key: WREN_KEY_<NAME>."""
    return "WREN_KEY_" + "".join(c if c.isalnum() else "_" for c in provider).upper()
