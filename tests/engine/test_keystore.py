"""One keyring layer (engine/keystore.py) under both key stores: the providers' API keys and
the server's key. Keys saved before, by the two separate implementations, are still read:
each wrote keyrings.alt's EncryptedKeyring file with a passphrase, which is what the tests
below write with keyrings.alt directly, then read through Wren."""

from __future__ import annotations

from pathlib import Path

import pytest

from wren.engine import keystore
from wren.engine.providers import keys as provider_keys
from wren.engine.server import keys as server_keys

pytest.importorskip("Cryptodome")
from keyrings.alt.file import EncryptedKeyring

KEY = "sk-old-way-0123456789abcdef"


def _write_the_old_way(path: Path, service: str, user: str, secret: str, passphrase: str) -> None:
    """Save as the former implementations did: keyrings.alt's EncryptedKeyring at `path`,
    its passphrase given instead of prompted."""

    class Old(EncryptedKeyring):
        file_path = str(path)

        def _get_new_password(self) -> str:
            return passphrase

        def _unlock(self) -> None:
            self.keyring_key = passphrase

    path.parent.mkdir(parents=True, exist_ok=True)
    Old().set_password(service, user, secret)
    assert secret.encode() not in path.read_bytes()


def test_a_provider_key_saved_before_is_still_read(wren_home, monkeypatch):
    monkeypatch.delenv(provider_keys.PASSPHRASE_ENV, raising=False)
    _write_the_old_way(provider_keys.key_file_path(), provider_keys.SERVICE, "acme", KEY, "old horse")
    assert provider_keys.read_key("acme", "file", passphrase="old horse") == KEY
    monkeypatch.setenv(provider_keys.PASSPHRASE_ENV, "old horse")
    assert provider_keys.read_key("acme", "file") == KEY
    with pytest.raises(provider_keys.KeyStoreError, match="passphrase does not open"):
        provider_keys.read_key("acme", "file", passphrase="new horse")
    provider_keys.save_key("other", "sk-new", "file")  # the same file takes new keys beside it
    assert provider_keys.read_key("acme", "file") == KEY and provider_keys.read_key("other", "file") == "sk-new"


def test_the_server_key_saved_before_is_still_read(tmp_path: Path):
    path = tmp_path / "keyring" / "wren-server-key.cfg"
    old = server_keys.KEY_PREFIX + "a" * 43
    _write_the_old_way(path, server_keys.SERVICE, server_keys.USERNAME, old, "server phrase")
    store = server_keys.open_keys(key_file=path, environ={server_keys.ENV_PASSPHRASE: "server phrase"})
    assert store.get() == old
    assert store.create() == (old, False)  # kept, not replaced
    with pytest.raises(server_keys.KeyStoreUnavailable, match="passphrase does not open"):
        server_keys.open_keys(key_file=path, environ={server_keys.ENV_PASSPHRASE: "wrong"}).get()
    with pytest.raises(server_keys.KeyStoreUnavailable, match="empty"):
        server_keys.open_keys(key_file=path, environ={}, passphrase=lambda new: "  ")


def test_both_stores_share_one_layer():
    assert provider_keys.KeyStoreError is keystore.KeyStoreError
    assert issubclass(server_keys.KeyStoreUnavailable, keystore.KeyStoreError)
    assert server_keys.ENV_PASSPHRASE == provider_keys.PASSPHRASE_ENV == keystore.PASSPHRASE_ENV
    assert provider_keys.explain_keyring_error is keystore.explain_keyring_error


def test_the_file_folder_is_private(tmp_path: Path):
    folder = tmp_path / "open"
    folder.mkdir(mode=0o755)
    keystore.encrypted_file(folder / "k.cfg", "phrase").set_password("s", "u", "v")
    assert oct(folder.stat().st_mode & 0o777) == "0o700"


def test_several_os_keyrings_read_through_write_first_delete_all(tmp_path: Path):
    first = keystore.encrypted_file(tmp_path / "first.cfg", "p")
    second = keystore.encrypted_file(tmp_path / "second.cfg", "p")
    second.set_password("wren-providers", "acme", KEY)  # kept by an earlier choice of store
    both = keystore.OsKeyrings([first, second])
    assert both.get_password("wren-providers", "acme") == KEY
    both.set_password("wren-providers", "beta", "sk-b")
    assert first.get_password("wren-providers", "beta") == "sk-b"
    assert second.get_password("wren-providers", "beta") is None
    first.set_password("wren-providers", "acme", "sk-newer")
    assert both.get_password("wren-providers", "acme") == "sk-newer"  # the first wins
    both.delete_password("wren-providers", "acme")
    assert first.get_password("wren-providers", "acme") is None
    assert second.get_password("wren-providers", "acme") is None
    from keyring.errors import PasswordDeleteError

    with pytest.raises(PasswordDeleteError):
        both.delete_password("wren-providers", "acme")


def test_a_keyring_chosen_in_the_environment_is_used_by_both_stores(monkeypatch):
    # keyring's own Secret Service backend over a locked collection (what a dismissed unlock
    # prompt gives): both stores use it and say it is locked.
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "tests.engine.cli.locked_keyring.Locked")
    backend, reason = keystore.os_keyring()
    assert type(backend).__name__ == "Locked" and reason is None
    assert server_keys.system_keyring() is not None
    with pytest.raises(provider_keys.KeyStoreError, match="keyring is locked"):
        provider_keys.read_key("acme", "system")


def test_a_plain_text_keyring_is_never_used(monkeypatch):
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    backend, _ = keystore.os_keyring()
    assert backend is None or keystore.is_os_backend(backend) or isinstance(backend, keystore.OsKeyrings)
    assert "Plaintext" not in type(backend).__name__
