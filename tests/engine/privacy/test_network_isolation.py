"""`wren ask` and a short window session work inside a network namespace with no interfaces
(`unshare -n`), and neither tries to open an internet socket (strace: no AF_INET/AF_INET6
connect; AF_UNIX, e.g. asyncio's self-pipe or a session bus, is fine)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
_INET = re.compile(r"connect\(\d+, \{sa_family=AF_INET6?\b")


def _isolation_or_skip() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace (needs root or user namespaces): {probe.stderr.strip()}")
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (tests/system/packages.txt)")
    return ["unshare", "-n"]


def _home_with_tiny_model(home: Path, tiny_model_dir: Path) -> None:
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    ModelRegistry(home / "models").register_folder(tiny_model_dir, name="tiny")
    store = Store(home / "wren.sqlite3")
    store.set_setting("model", "tiny")
    store.close()


def _run_isolated(command: list[str], home: Path, trace: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "WREN_HOME": str(home), "WREN_TORCH_COMPILE": "off",
                   "QT_QPA_PLATFORM": "offscreen", **env}
    environment.pop("DBUS_SESSION_BUS_ADDRESS", None)
    return subprocess.run(
        _isolation_or_skip() + ["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace)] + command,
        capture_output=True, text=True, timeout=300, env=environment, cwd=REPO)


def _inet_connects(trace: Path) -> list[str]:
    return [line for line in trace.read_text(errors="replace").splitlines() if _INET.search(line)]


def test_wren_ask_works_offline_and_opens_no_internet_socket(tmp_path, tiny_model_dir):
    home = tmp_path / "home"
    _home_with_tiny_model(home, tiny_model_dir)
    trace = tmp_path / "ask.strace"
    done = _run_isolated([sys.executable, "-m", "wren.engine.terminal", "ask", "--max-tokens", "4", "Hello there"],
                         home, trace)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), "the tiny model should have answered something"
    assert trace.exists() and _inet_connects(trace) == []


def test_a_window_session_works_offline_and_opens_no_internet_socket(tmp_path, tiny_model_dir):
    home = tmp_path / "home"
    _home_with_tiny_model(home, tiny_model_dir)
    trace = tmp_path / "window.strace"
    done = _run_isolated([sys.executable, "-c", "import sys; from wren.desktop.app import main; sys.exit(main())"],
                         home, trace, WREN_DESKTOP_SMOKE="Hello there", WREN_DESKTOP_SMOKE_TIMEOUT="200")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert '"smoke": "answer"' in done.stdout
    assert _inet_connects(trace) == []
