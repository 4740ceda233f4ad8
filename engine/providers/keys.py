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

import importlib
import os
from pathlib import Path

from .. import paths
from ..errors import WrenError

SERVICE = "wren-providers"
KEY_STORES = ("auto", "system", "file", "env", "none")
PASSPHRASE_ENV = "WREN_KEYRING_PASSPHRASE"  # the same name `wren serve` reads
_OLD_PASSPHRASE_ENV = "WREN_KEYS_PASSPHRASE"  # this build's first name for it, still read


def passphrase_from_env() -> str | None:
    """The encrypted key file's passphrase from the environment, if set."""
    return os.environ.get(PASSPHRASE_ENV) or os.environ.get(_OLD_PASSPHRASE_ENV)
KEY_FILE = "provider-keys.cfg"
_REFERENCE = "password reference value"
# The OS stores, best first; anything else keyring offers is not one.
_OS_BACKENDS = (
    ("keyring.backends.macOS", "Keyring"),
    ("keyring.backends.Windows", "WinVaultKeyring"),
    ("keyring.backends.SecretService", "Keyring"),
    ("keyring.backends.libsecret", "Keyring"),
    ("keyring.backends.kwallet", "DBusKeyring"),
)

# The sentence a person reads first; the keyring's own words (a D-Bus error) come last.
NO_OS_KEYRING = (
    "No OS keyring is available here, as on a headless Linux machine without a Secret "
    "Service. Keep the key in an encrypted file with a passphrase (key store \"file\"; Wren "
    "reads the passphrase from " + PASSPHRASE_ENV + " when it runs), or in an environment "
    "variable (key store \"env\"). Wren never writes keys as plain text. Details: {reason}"
)


class KeyStoreError(WrenError):
    """A key could not be stored or read."""


def system_keyring():
    """(the OS keyring backend, None) or (None, why there is none). Looked up afresh on
    each call: a Secret Service may start after Wren did."""
    reasons = []
    for module_name, class_name in _OS_BACKENDS:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
            priority = cls.priority  # raises where this store cannot run
        except Exception as exc:  # ImportError, RuntimeError, D-Bus errors...
            reasons.append(f"{module_name.rsplit('.', 1)[1]}: {exc}")
            continue
        if priority > 0:
            return cls(), None
    secret = next((r for r in reasons if r.startswith("SecretService")), None)
    return None, (secret or "; ".join(reasons) or "no keyring backend")


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
    try:
        from keyrings.alt.file import EncryptedKeyring
        EncryptedKeyring._get_crypto_impl()
    except ImportError as exc:
        raise KeyStoreError(f"the encrypted key file needs keyrings.alt and pycryptodomex ({exc})") from None
    passphrase = passphrase if passphrase is not None else passphrase_from_env()
    if not passphrase:
        raise KeyStoreError(f"the encrypted key file needs its passphrase: set {PASSPHRASE_ENV}")
    secret: str = passphrase  # a str from here on, for the class below

    class PassphraseFile(EncryptedKeyring):
        """EncryptedKeyring at Wren's path, unlocked with a given passphrase (not a prompt)."""

        file_path = str(key_file_path())

        def _get_new_password(self) -> str:
            return secret

        def _unlock(self) -> None:
            self.keyring_key = passphrase
            try:
                ok = self.get_password("keyring-setting", "password reference") == _REFERENCE
            except Exception:
                ok = False
            if not ok:
                self._lock()
                raise KeyStoreError(f"the passphrase does not open {self.file_path}")

    path = key_file_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.chmod(path.parent, 0o700)
    except OSError:
        pass
    return PassphraseFile()


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
