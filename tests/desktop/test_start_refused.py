"""wren-desktop with a data folder other users can write to: it says so (standard error, and
a message box where there is a screen), exits 2, and leaves the folder as it was."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(os.name == "nt", reason="POSIX folder modes")
@pytest.mark.parametrize("mode", [0o1777, 0o777], ids=oct)
def test_wren_desktop_refuses_a_world_writable_data_folder_cleanly(tmp_path, mode):
    home = tmp_path / "shared"
    home.mkdir()
    home.chmod(mode)
    env = dict(os.environ, WREN_HOME=str(home), QT_QPA_PLATFORM="offscreen")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from wren.desktop.app import main; sys.exit(main())"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"wren-desktop: the data folder {home} can be written by every user")
    assert "WREN_HOME" in done.stderr and "Traceback" not in done.stderr
    assert stat.S_IMODE(home.stat().st_mode) == mode and list(home.iterdir()) == []


def test_the_refusal_shows_in_a_message_box(qtbot, capsys):
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from wren.desktop.app import cannot_start

    shown: list[tuple[str, str]] = []

    def read_and_close() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, read_and_close)
            return
        shown.append((box.windowTitle(), box.text()))
        box.accept()

    QTimer.singleShot(0, read_and_close)
    assert cannot_start("the data folder /x can be written by every user", [], box=True) == 2
    assert shown == [("Wren cannot start", "the data folder /x can be written by every user")]
    assert capsys.readouterr().err == "wren-desktop: the data folder /x can be written by every user\n"
