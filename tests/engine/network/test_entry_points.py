"""Wren's own programs as a user starts them: `wren ask` (and the resident engine it starts),
the window (a whole answer, offscreen) and `wren serve` answering a request. Each installs
the network guard itself, and what they record is all loopback and all named."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[3]
KEY = "wren-test-server-key-0123456789"


def _home_with_tiny_model(home: Path, tiny_model_dir: Path) -> None:
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    ModelRegistry(home / "models").register_folder(tiny_model_dir, name="tiny")
    store = Store(home / "wren.sqlite3")
    store.set_setting("model", "tiny")
    store.close()


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "WREN_HOME": str(home), "WREN_TORCH_COMPILE": "off", "QT_QPA_PLATFORM": "offscreen", **extra}
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    return env


def _wren(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wren.engine.terminal", *args], capture_output=True, text=True,
                          timeout=300, env=_env(home, **extra), cwd=REPO)


def _serve_one_request(home: Path) -> None:
    server = subprocess.Popen([sys.executable, "-m", "wren.engine.terminal", "serve", "--port", "0"],
                              stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                              env=_env(home, WREN_API_KEY=KEY), cwd=REPO)
    try:
        port = None
        deadline = time.monotonic() + 240
        while port is None and time.monotonic() < deadline:
            line = server.stderr.readline() if server.stderr else ""
            if not line and server.poll() is not None:
                pytest.fail(f"wren serve exited with {server.returncode}")
            if found := re.search(r"at http://127\.0\.0\.1:(\d+)", line):
                port = int(found.group(1))
        assert port is not None, "wren serve did not say where it listens"
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)


def test_wren_ask_the_window_and_wren_serve_record_only_loopback(tmp_path, tiny_model_dir):
    from wren.engine.network import ledger

    home = tmp_path / "home"
    _home_with_tiny_model(home, tiny_model_dir)
    try:
        asked = _wren(home, "ask", "--keep-alive", "60", "--max-tokens", "4", "Hello there")  # a resident engine
        assert asked.returncode == 0, asked.stderr[-2000:]
        window = subprocess.run([sys.executable, "-c", "import sys; from wren.desktop.app import main; sys.exit(main())"],
                                capture_output=True, text=True, timeout=300, cwd=REPO,
                                env=_env(home, WREN_DESKTOP_SMOKE="Hello there", WREN_DESKTOP_SMOKE_TIMEOUT="200"))
        assert window.returncode == 0 and '"smoke": "answer"' in window.stdout, window.stderr[-2000:]
        _serve_one_request(home)
    finally:
        _wren(home, "resident", "stop")
    found = ledger.entries(home)
    processes = {e.process for e in found}
    assert {"wren ask", "window", "wren serve"} <= processes  # each program guarded itself
    asks = [e for e in found if e.process == "wren ask"]
    assert asks and all(e.part == "Wren's own engine" and e.port is None for e in asks)  # its resident engine's socket
    assert [e for e in found if not e.loopback] == []
    assert [e for e in found if e.outcome != "allowed"] == []
    listens = [e for e in found if e.kind == "listen" and e.process == "wren serve"]
    assert listens and all(e.host == "127.0.0.1" and e.part == "wren serve" for e in listens)
    assert "Hello there" not in (ledger.folder(home) / ledger.FILE).read_text()


def test_wren_serve_for_other_machines_is_refused_under_the_lock(tmp_path, tiny_model_dir):
    home = tmp_path / "home"
    _home_with_tiny_model(home, tiny_model_dir)
    served = subprocess.run([sys.executable, "-m", "wren.engine.terminal", "serve", "--host", "0.0.0.0",
                             "--allow-remote", "--port", "0"], capture_output=True, text=True, timeout=300, cwd=REPO,
                            env=_env(home, WREN_OFFLINE="1", WREN_API_KEY=KEY))
    assert served.returncode != 0
    assert "Wren's offline lock is on (set by WREN_OFFLINE=1 in the environment): it refused to listen on 0.0.0.0:" \
        in served.stderr, served.stderr[-2000:]
    from wren.engine.network import ledger

    [refused] = [e for e in ledger.entries(home) if e.outcome == "refused"]
    assert (refused.kind, refused.host, refused.part, refused.process) == ("listen", "0.0.0.0", "wren serve", "wren serve")
