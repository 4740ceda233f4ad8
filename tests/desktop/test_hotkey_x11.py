"""The X11 global hotkey, on a real (virtual) X server: grab, press, clash, release.

Runs where Xvfb and libXtst exist (Debian: apt-get install xvfb); skipped elsewhere."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import ctypes, ctypes.util, json, sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from wren.desktop.tray.hotkey import GlobalHotkey

app = QApplication([])
first, second = GlobalHotkey(), GlobalHotkey()
result = {"platform": app.platformName(), "grab": first.set_shortcut("Ctrl+Alt+Space"),
          "clash": second.set_shortcut("Ctrl+Alt+Space"), "other": second.set_shortcut("Ctrl+Alt+K")}
hits = []
first.activated.connect(lambda: hits.append("first"))
second.activated.connect(lambda: hits.append("second"))

x = ctypes.CDLL(ctypes.util.find_library("X11"))
xtst = ctypes.CDLL(ctypes.util.find_library("Xtst"))
x.XOpenDisplay.restype = ctypes.c_void_p
x.XOpenDisplay.argtypes = [ctypes.c_char_p]
x.XStringToKeysym.restype = ctypes.c_ulong
x.XStringToKeysym.argtypes = [ctypes.c_char_p]
x.XKeysymToKeycode.restype = ctypes.c_ubyte
x.XKeysymToKeycode.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
x.XFlush.argtypes = [ctypes.c_void_p]
xtst.XTestFakeKeyEvent.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_ulong]
display = x.XOpenDisplay(None)

def press(*names):
    codes = [x.XKeysymToKeycode(display, x.XStringToKeysym(n.encode())) for n in names]
    for code in codes:
        xtst.XTestFakeKeyEvent(display, code, 1, 0)
    for code in reversed(codes):
        xtst.XTestFakeKeyEvent(display, code, 0, 0)
    x.XFlush(display)

QTimer.singleShot(100, lambda: press("Control_L", "Alt_L", "space"))
QTimer.singleShot(200, lambda: press("Control_L", "Alt_L", "k"))
QTimer.singleShot(300, lambda: press("Control_L", "Alt_L", "j"))  # grabbed by nobody
def finish():
    first.clear()
    result["regrab"] = GlobalHotkey().set_shortcut("Ctrl+Alt+Space")
    result["hits"] = hits
    print(json.dumps(result))
    app.quit()
QTimer.singleShot(1500, finish)
app.exec()
'''


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("Xvfb") or not ctypes.util.find_library("Xtst"), reason="needs Xvfb and libXtst")
def test_x11_hotkey_grabs_fires_and_reports_a_clash(qtbot):
    display = f":{90 + os.getpid() % 9}"
    server = subprocess.Popen(["Xvfb", display, "-screen", "0", "800x600x24", "-nolisten", "tcp"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        qtbot.waitUntil(lambda: Path(f"/tmp/.X11-unix/X{display[1:]}").exists() or server.poll() is not None, timeout=10000)
        assert server.poll() is None, "Xvfb did not start"
        env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb"}
        out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        if "could not load the Qt platform plugin" in out.stderr.lower():
            pytest.skip("Qt's xcb plugin lacks system libraries here")
        import json

        result = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        server.terminate()
        server.wait(10)
    assert result["platform"] == "xcb"
    assert result["grab"] is None
    assert result["clash"] == "another program already uses this shortcut"
    assert result["other"] is None
    assert result["hits"] == ["first", "second"]
    assert result["regrab"] is None  # released on clear()
