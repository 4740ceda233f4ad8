"""packaging/linux: the .desktop entry and AppStream metainfo pass the freedesktop
validators, agree on Wren's id, and the icons come out at the hicolor sizes."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINUX = REPO / "packaging" / "linux"
APP_ID = "io.github.wren_assistant.Wren"
DESKTOP = LINUX / f"{APP_ID}.desktop"
METAINFO = LINUX / f"{APP_ID}.metainfo.xml"


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package {package}, listed in tests/system/packages.txt)")
    return path


def test_desktop_entry_validates():
    tool = _tool("desktop-file-validate", "desktop-file-utils")
    done = subprocess.run([tool, str(DESKTOP)], check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "error" not in (done.stdout + done.stderr).lower()


def test_desktop_validator_catches_a_broken_entry(tmp_path):
    """The check is real: the same validator refuses an entry without its required keys."""
    tool = _tool("desktop-file-validate", "desktop-file-utils")
    broken = tmp_path / f"{APP_ID}.desktop"
    broken.write_text("[Desktop Entry]\nName=Wren\nExec=wren-desktop\n", encoding="utf-8")  # no Type
    done = subprocess.run([tool, str(broken)], check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0


def test_metainfo_validates():
    tool = _tool("appstreamcli", "appstream")
    done = subprocess.run([tool, "validate", "--no-net", "--explain", str(METAINFO)], check=False,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ids_agree_with_the_app():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(DESKTOP, encoding="utf-8")
    main = entry["Desktop Entry"]
    assert main["Icon"] == APP_ID
    assert main["Exec"].split()[0] == "wren-desktop"
    root = ET.parse(METAINFO).getroot()
    assert root.findtext("id") == APP_ID
    assert root.findtext("launchable") == DESKTOP.name
    assert {b.text for b in root.iter("binary")} == {"wren", "wren-desktop"}
    # Wayland compositors match a window to its entry by the app's desktop file name
    assert f'setDesktopFileName("{APP_ID}")' in (REPO / "desktop" / "app.py").read_text(encoding="utf-8")


def test_icons_at_hicolor_sizes(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "packaging" / "make_icons.py"), str(tmp_path)], check=False,
                          capture_output=True, text=True, timeout=120, env=None)
    assert done.returncode == 0, done.stderr
    from PySide6.QtGui import QImage

    for size in (16, 22, 24, 32, 48, 64, 128, 256, 512):
        path = tmp_path / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
        image = QImage(str(path))
        assert (image.width(), image.height()) == (size, size), path
        assert image.hasAlphaChannel()
        # the corners are transparent (a rounded square), the middle is drawn
        assert image.pixelColor(0, 0).alpha() == 0
        assert image.pixelColor(size // 2, size // 2).alpha() == 255
    scalable = tmp_path / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg"
    assert scalable.read_bytes() == (REPO / "resources" / "desktop" / "wren.svg").read_bytes()
