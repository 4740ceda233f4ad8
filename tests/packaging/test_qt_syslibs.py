"""desktop/syslibs.py: before Qt starts on X11, missing system libraries are named with the
apt and dnf packages that provide them (a fake library lookup stands in for the loader)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wren.desktop import syslibs

REPO = Path(__file__).resolve().parents[2]


def _without(*sonames: str):
    return lambda soname: soname not in sonames


def test_missing_xcb_libraries_name_their_packages():
    message = syslibs.check_qt_libraries(
        environ={"DISPLAY": ":0"}, platform="linux",
        lookup=_without("libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"),
    )
    assert message is not None
    assert "libxcb-cursor.so.0, libxcb-icccm.so.4, libxcb-keysyms.so.1" in message
    assert "sudo apt install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1\n" in message
    assert "sudo dnf install xcb-util-cursor xcb-util-wm xcb-util-keysyms\n" in message


def test_a_dnf_package_is_named_once():
    message = syslibs.check_qt_libraries(
        environ={}, platform="linux", lookup=_without("libxcb-shm.so.0", "libxcb-sync.so.1"),
    )
    assert "sudo apt install libxcb-shm0 libxcb-sync1\n" in message
    assert "sudo dnf install libxcb\n" in message


def test_nothing_to_say_when_everything_loads():
    assert syslibs.check_qt_libraries(environ={}, platform="linux", lookup=lambda _s: True) is None


@pytest.mark.parametrize(("environ", "platform", "expected"), [
    ({"QT_QPA_PLATFORM": "offscreen"}, "linux", "offscreen"),
    ({"QT_QPA_PLATFORM": "wayland;xcb"}, "linux", "wayland"),
    ({"QT_QPA_PLATFORM": "xcb:foo=1"}, "linux", "xcb"),
    ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", "wayland"),
    ({"XDG_SESSION_TYPE": "x11", "DISPLAY": ":0"}, "linux", "xcb"),
    ({}, "darwin", ""),
    ({}, "win32", ""),
])
def test_platform_qt_will_pick(environ, platform, expected):
    assert syslibs.qt_platform(environ, platform) == expected


def test_no_check_off_xcb():
    calls = []

    def lookup(soname):
        calls.append(soname)
        return False

    assert syslibs.check_qt_libraries({"QT_QPA_PLATFORM": "offscreen"}, "linux", lookup) is None
    assert syslibs.check_qt_libraries({}, "darwin", lookup) is None
    assert calls == []


def test_the_real_loader_finds_a_present_library_and_not_an_absent_one():
    assert syslibs._loadable("libc.so.6")
    assert not syslibs._loadable("libwren-no-such-library.so.9")


def test_the_list_covers_what_the_xcb_plugin_links():
    """Every library Qt's xcb plugin and its helpers link against (less the C/C++ runtime
    and Qt's own) is in the list, so a new Qt that needs another one is noticed here."""
    import shutil

    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    import PySide6

    qt = Path(PySide6.__file__).parent / "Qt"
    files = [qt / "plugins" / "platforms" / "libqxcb.so", qt / "lib" / "libQt6XcbQpa.so.6", qt / "lib" / "libQt6Gui.so.6"]
    needed = set()
    for f in files:
        out = subprocess.run(["readelf", "-d", str(f)], capture_output=True, text=True, check=True).stdout
        needed |= {line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line}
    runtime = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libz.so.1", "libgthread-2.0.so.0"}
    listed = {lib.soname for lib in syslibs.XCB_LIBRARIES}
    missing = {n for n in needed - runtime if not n.startswith("libQt6")} - listed
    assert not missing, f"add these to desktop/syslibs.py: {sorted(missing)}"


@pytest.mark.slow
def test_wren_desktop_stops_with_the_message_before_qt(tmp_path):
    """On X11 with a library missing, `wren-desktop` exits 2 with the message instead of Qt's
    abort. The loader is made to miss one library by a stand-in lookup, set up in the child."""
    code = (
        "import sys\n"
        "from wren.desktop import syslibs\n"
        "real = syslibs._loadable\n"
        "syslibs._loadable = lambda s: s != 'libxcb-icccm.so.4' and real(s)\n"
        "syslibs.check_qt_libraries.__defaults__ = (None, None, syslibs._loadable)\n"
        "from wren.desktop.app import main\n"
        "sys.exit(main(['--no-tray']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=":99", XDG_SESSION_TYPE="x11", WREN_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "libxcb-icccm.so.4" in done.stderr
    assert "sudo apt install libxcb-icccm4" in done.stderr
    assert "sudo dnf install xcb-util-wm" in done.stderr
