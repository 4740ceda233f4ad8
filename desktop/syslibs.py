"""The system libraries Qt's X11 (xcb) platform plugin needs, checked before Qt starts.

Without them Qt aborts with "Could not load the Qt platform plugin xcb", which does not
say what to install. Wren looks each library up first and, when some are missing, names
the exact Debian/Ubuntu (apt) and Fedora (dnf) packages that provide them. The list is
the plugin's and QtGui's own dependencies (`readelf -d libqxcb.so libQt6XcbQpa.so.6
libQt6Gui.so.6`) less the C/C++ runtime; packaging/README.md repeats it.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SystemLibrary:
    soname: str
    apt: str  # Debian 12 / Ubuntu 22.04+ package
    dnf: str  # Fedora / RHEL package


XCB_LIBRARIES: tuple[SystemLibrary, ...] = (
    SystemLibrary("libxcb-cursor.so.0", "libxcb-cursor0", "xcb-util-cursor"),
    SystemLibrary("libxcb-icccm.so.4", "libxcb-icccm4", "xcb-util-wm"),
    SystemLibrary("libxcb-keysyms.so.1", "libxcb-keysyms1", "xcb-util-keysyms"),
    SystemLibrary("libxcb-image.so.0", "libxcb-image0", "xcb-util-image"),
    SystemLibrary("libxcb-render-util.so.0", "libxcb-render-util0", "xcb-util-renderutil"),
    SystemLibrary("libxcb-util.so.1", "libxcb-util1", "xcb-util"),
    SystemLibrary("libxkbcommon-x11.so.0", "libxkbcommon-x11-0", "libxkbcommon-x11"),
    SystemLibrary("libxkbcommon.so.0", "libxkbcommon0", "libxkbcommon"),
    SystemLibrary("libxcb.so.1", "libxcb1", "libxcb"),
    SystemLibrary("libxcb-randr.so.0", "libxcb-randr0", "libxcb"),
    SystemLibrary("libxcb-render.so.0", "libxcb-render0", "libxcb"),
    SystemLibrary("libxcb-shape.so.0", "libxcb-shape0", "libxcb"),
    SystemLibrary("libxcb-shm.so.0", "libxcb-shm0", "libxcb"),
    SystemLibrary("libxcb-sync.so.1", "libxcb-sync1", "libxcb"),
    SystemLibrary("libxcb-xfixes.so.0", "libxcb-xfixes0", "libxcb"),
    SystemLibrary("libxcb-xkb.so.1", "libxcb-xkb1", "libxcb"),
    SystemLibrary("libX11-xcb.so.1", "libx11-xcb1", "libX11-xcb"),
    SystemLibrary("libX11.so.6", "libx11-6", "libX11"),
    SystemLibrary("libGL.so.1", "libgl1", "libglvnd-glx"),
    SystemLibrary("libEGL.so.1", "libegl1", "libglvnd-egl"),
    SystemLibrary("libfontconfig.so.1", "libfontconfig1", "fontconfig"),
    SystemLibrary("libfreetype.so.6", "libfreetype6", "freetype"),
    SystemLibrary("libglib-2.0.so.0", "libglib2.0-0", "glib2"),
    SystemLibrary("libdbus-1.so.3", "libdbus-1-3", "dbus-libs"),
)


def _loadable(soname: str) -> bool:
    """What the dynamic loader finds, as Qt will look it up (LD_LIBRARY_PATH, ld.so.cache)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def qt_platform(environ: Mapping[str, str] | None = None, platform: str | None = None) -> str:
    """The platform plugin Qt will pick: QT_QPA_PLATFORM's first choice, else Wayland in a
    Wayland session and xcb elsewhere on Linux; "" off Linux, where no check applies."""
    env = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    chosen = env.get("QT_QPA_PLATFORM", "").strip()
    if chosen:
        return chosen.split(";")[0].split(":")[0].strip()
    if not platform.startswith("linux"):
        return ""
    if env.get("WAYLAND_DISPLAY") or env.get("XDG_SESSION_TYPE") == "wayland":
        return "wayland"
    return "xcb"


def missing_libraries(
    lookup: Callable[[str], bool] = _loadable, libraries: tuple[SystemLibrary, ...] = XCB_LIBRARIES
) -> list[SystemLibrary]:
    return [lib for lib in libraries if not lookup(lib.soname)]


def missing_message(missing: list[SystemLibrary]) -> str:
    apt = " ".join(dict.fromkeys(lib.apt for lib in missing))
    dnf = " ".join(dict.fromkeys(lib.dnf for lib in missing))
    names = ", ".join(lib.soname for lib in missing)
    return (
        "Wren cannot open its window: Qt's X11 (xcb) platform needs system libraries that "
        f"are not installed: {names}.\n"
        f"  Debian/Ubuntu:  sudo apt install {apt}\n"
        f"  Fedora/RHEL:    sudo dnf install {dnf}\n"
        "Then start Wren again. (In a Wayland session, QT_QPA_PLATFORM=wayland uses Wayland instead.)"
    )


def check_qt_libraries(
    environ: Mapping[str, str] | None = None,
    platform: str | None = None,
    lookup: Callable[[str], bool] = _loadable,
) -> str | None:
    """None when Qt can start; else the message that names what to install."""
    if qt_platform(environ, platform) != "xcb":
        return None
    missing = missing_libraries(lookup)
    return missing_message(missing) if missing else None
