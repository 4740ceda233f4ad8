"""Provider keys in a REAL key store: a Secret Service (gnome-keyring-daemon on a private
D-Bus session, as on a Linux desktop), falling back to keyrings.alt's encrypted file where
that cannot start; never plain text, never the database."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wren.engine.providers import keys

KEY = "sk-test-" + "Zq8Wv7Ut6Sr5Qp4On3Ml2Kj1Ih0Gf"


def _start_secret_service(tmp: Path):
    """dbus-run-session + gnome-keyring-daemon --unlock; (process, bus address) or a reason."""
    for tool in ("dbus-run-session", "gnome-keyring-daemon"):
        if shutil.which(tool) is None:
            return None, f"{tool} is not installed (Debian: dbus, gnome-keyring; tests/system/packages.txt)"
    home = tmp / "home"
    (home / ".cache").mkdir(parents=True)
    run = tmp / "run"
    run.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(run)}
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    # In the foreground, so its pid is known and it is stopped with the bus (a daemonized
    # one can outlive the session).
    script = ('printf %s test-password | gnome-keyring-daemon --foreground --unlock --components=secrets '
              '>/dev/null 2>&1 & echo $!; echo "$DBUS_SESSION_BUS_ADDRESS"; exec cat')
    proc = subprocess.Popen(["dbus-run-session", "--", "sh", "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    daemon = proc.stdout.readline().strip()
    address = proc.stdout.readline().strip()
    if not address or not daemon.isdigit():
        proc.kill()
        return None, "dbus-run-session started no session bus"
    proc.daemon_pid = int(daemon)
    return proc, address


def _stop(proc) -> None:
    try:
        os.kill(proc.daemon_pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _default_collection_missing() -> str | None:
    """None when the Secret Service's default collection exists and is unlocked, else why not."""
    import secretstorage

    try:
        connection = secretstorage.dbus_init()
        try:
            collection = secretstorage.Collection(connection)  # the "default" alias
            return "it is locked" if collection.is_locked() else None
        finally:
            connection.close()
    except Exception as exc:  # ItemNotFoundException, D-Bus errors
        return f"{type(exc).__name__}: {exc}"


def _ready_secret_service(tmp: Path, monkeypatch) -> tuple[object, object]:
    """(daemon process, backend) once the Secret Service answers with an unlocked default
    collection; (process or None, the reason) otherwise."""
    proc, address = _start_secret_service(tmp)
    if proc is None:
        return None, address
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
    monkeypatch.setenv("HOME", str(tmp / "home"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp / "run"))
    deadline = time.monotonic() + 20
    backend, reason = keys.system_keyring()
    while backend is None and time.monotonic() < deadline:  # the daemon registers on the bus
        time.sleep(0.1)
        backend, reason = keys.system_keyring()
    if backend is None:
        return proc, f"the Secret Service did not answer: {reason}"
    # The daemon answers on the bus before --unlock has made the "login" keyring the default
    # collection; storing a key in that gap asks for a new collection through a prompt no
    # test can answer ("Prompt dismissed", seen in CI). And about one start in six here, the
    # daemon writes login.keyring but never puts the collection on the bus (only "session"
    # is there, however long one waits): that start is abandoned.
    missing = _default_collection_missing()
    deadline = time.monotonic() + 5
    while missing and time.monotonic() < deadline:
        time.sleep(0.1)
        missing = _default_collection_missing()
    return proc, (f"the Secret Service has no unlocked default keyring: {missing}" if missing else backend)


@pytest.fixture
def secret_service(tmp_path, monkeypatch):
    """A running, unlocked Secret Service for this test (up to three fresh starts), or the
    reason there is none."""
    proc, found = None, "not started"
    for attempt in range(3):
        if proc is not None:
            _stop(proc)
        proc, found = _ready_secret_service(tmp_path / f"start{attempt}", monkeypatch)
        if proc is None or not isinstance(found, str):
            break
    try:
        yield found
    finally:
        if proc is not None:
            _stop(proc)


@pytest.fixture
def key_store(secret_service, monkeypatch):
    """"system" over the real Secret Service, else "file" (keyrings.alt, encrypted)."""
    if not isinstance(secret_service, str):
        return "system"
    try:
        from keyrings.alt.file import EncryptedKeyring

        EncryptedKeyring._get_crypto_impl()
    except ImportError as exc:
        pytest.skip(f"no Secret Service ({secret_service}) and no encrypted file store ({exc})")
    monkeypatch.setenv(keys.PASSPHRASE_ENV, "a passphrase for the test")
    return "file"


def test_key_round_trip_in_a_real_store(key_store, wren_home):
    keys.save_key("acme", KEY, key_store)
    assert keys.read_key("acme", key_store) == KEY
    keys.delete_key("acme", key_store)
    with pytest.raises(keys.KeyStoreError, match="no key for provider 'acme'"):
        keys.read_key("acme", key_store)
    _assert_nowhere_in_plain_text(wren_home)


def test_secret_service_is_the_one_auto_picks(secret_service):
    if isinstance(secret_service, str):
        pytest.skip(f"no Secret Service here: {secret_service}")
    assert type(secret_service).__module__ == "keyring.backends.SecretService"
    assert keys.resolve_store("auto") == "system"
    assert keys.keyring_status() is None


def test_headless_without_secret_service_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={tmp_path}/no-bus")
    if keys.system_keyring()[0] is not None:
        pytest.skip("an OS keyring other than the Secret Service answers here")
    problem = keys.keyring_status()
    assert "No OS keyring is available" in problem and "encrypted file" in problem
    assert keys.PASSPHRASE_ENV in problem and "environment variable" in problem
    with pytest.raises(keys.KeyStoreError, match="No OS keyring"):
        keys.resolve_store("auto")


def test_encrypted_file_needs_its_passphrase_and_holds_no_plain_key(monkeypatch, wren_home):
    pytest.importorskip("Cryptodome")
    monkeypatch.delenv(keys.PASSPHRASE_ENV, raising=False)
    with pytest.raises(keys.KeyStoreError, match=keys.PASSPHRASE_ENV):
        keys.save_key("acme", KEY, "file")
    keys.save_key("acme", KEY, "file", passphrase="right horse")
    assert keys.read_key("acme", "file", passphrase="right horse") == KEY
    with pytest.raises(keys.KeyStoreError, match="passphrase does not open"):
        keys.read_key("acme", "file", passphrase="wrong")
    assert keys.key_file_path().is_file()
    _assert_nowhere_in_plain_text(wren_home)


def test_env_key_store(monkeypatch):
    monkeypatch.setenv("WREN_KEY_ACME_AI", KEY)
    assert keys.env_name("acme.ai") == "WREN_KEY_ACME_AI"
    assert keys.read_key("acme.ai", "env") == KEY
    monkeypatch.delenv("WREN_KEY_ACME_AI")
    with pytest.raises(keys.KeyStoreError, match=r"\$WREN_KEY_ACME_AI, which is not set"):
        keys.read_key("acme.ai", "env")
    assert keys.read_key("acme.ai", "none") is None


@pytest.mark.slow
def test_cli_add_reads_the_key_from_stdin_and_keeps_it_out_of_the_data_folder(key_store, wren_home):
    """`wren providers add` in a child process, the key on standard input."""
    from tests.engine.providers.fakeserver import FakeServer

    server = FakeServer().start()
    try:
        env = {**os.environ}
        args = [sys.executable, "-m", "wren.engine.terminal", "providers", "add", "acme", "--base-url", server.base_url,
                "--key-store", key_store]
        added = subprocess.run(args, input=KEY + "\n", capture_output=True, text=True, env=env, timeout=60)
        assert added.returncode == 0, added.stderr
        assert "acme/fake-chat" in added.stdout and KEY not in added.stdout
        listed = subprocess.run([sys.executable, "-m", "wren.engine.terminal", "providers", "list"], capture_output=True,
                                text=True, env=env, timeout=60)
        assert "acme" in listed.stdout and KEY not in listed.stdout
        tested = subprocess.run([sys.executable, "-m", "wren.engine.terminal", "providers", "test", "acme"],
                                capture_output=True, text=True, env=env, timeout=60)
        assert tested.returncode == 0, tested.stderr
        assert "Hello from the remote side." in tested.stdout
        assert server.chats()[-1].headers["authorization"] == f"Bearer {KEY}"  # read back from the store
        _assert_nowhere_in_plain_text(wren_home)
        removed = subprocess.run([sys.executable, "-m", "wren.engine.terminal", "providers", "rm", "acme"],
                                 capture_output=True, text=True, env=env, timeout=60)
        assert removed.returncode == 0, removed.stderr
        with pytest.raises(keys.KeyStoreError):
            keys.read_key("acme", key_store)
    finally:
        server.stop()


def _assert_nowhere_in_plain_text(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), f"the key is in plain text in {path}"


def test_the_passphrase_variable_is_the_one_wren_serve_reads(monkeypatch):
    """One name for the encrypted key file's passphrase across `wren serve` and providers;
    the first name this build used is still read."""
    from wren.engine.server.keys import ENV_PASSPHRASE

    assert keys.PASSPHRASE_ENV == ENV_PASSPHRASE
    monkeypatch.delenv(keys.PASSPHRASE_ENV, raising=False)
    monkeypatch.setenv("WREN_KEYS_PASSPHRASE", "older name")
    assert keys.passphrase_from_env() == "older name"
    monkeypatch.setenv(keys.PASSPHRASE_ENV, "current name")
    assert keys.passphrase_from_env() == "current name"


def test_a_replaced_provider_leaves_no_old_key_behind(key_store, make_engine):
    """Re-adding a provider under its name replaced it silently, its old key left in the store."""
    import asyncio

    async def go():
        engine = make_engine()
        try:
            await engine.providers.add("acme", "http://127.0.0.1:9/v1", api_key=KEY, key_store=key_store,
                                       models=("m",))
            assert keys.read_key("acme", key_store) == KEY
            await engine.providers.add("acme", "http://127.0.0.1:9/v1", models=("m",))  # now with no key
            with pytest.raises(keys.KeyStoreError, match="no key for provider 'acme'"):
                keys.read_key("acme", key_store)
            with pytest.raises(Exception, match="not an environment variable's name"):
                await engine.providers.add("acme2", "http://127.0.0.1:9/v1", key_store="env", key_env="BAD NAME")
        finally:
            await engine.close()

    asyncio.run(go())
