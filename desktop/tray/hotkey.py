"""A system-wide shortcut for the quick prompt, with no dependency beyond the OS's own libraries.

X11: XGrabKey on a second Xlib connection watched by a QSocketNotifier. Windows:
RegisterHotKey and a native event filter for WM_HOTKEY. Wayland and macOS give programs no
dependency-free way to grab a global key; there the user binds `wren-desktop --quick` in
the system's keyboard settings, which reaches the running Wren through the single-instance
socket.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

from PySide6.QtCore import QAbstractNativeEventFilter, QCoreApplication, QObject, QSocketNotifier, Qt, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence

DEFAULT_SHORTCUT = "Ctrl+Alt+Space"

_X_MODS = {
    Qt.KeyboardModifier.ShiftModifier: 1 << 0,
    Qt.KeyboardModifier.ControlModifier: 1 << 2,
    Qt.KeyboardModifier.AltModifier: 1 << 3,  # Mod1
    Qt.KeyboardModifier.MetaModifier: 1 << 6,  # Mod4, the Super key
}
_X_LOCKS = (0, 1 << 1, 1 << 4, (1 << 1) | (1 << 4))  # none, CapsLock, NumLock, both
_X_KEYPRESS = 2
_X_BAD_ACCESS = 10


def unsupported_reason() -> str | None:
    """Why this platform gets no global hotkey, or None when it does."""
    platform = QGuiApplication.platformName()
    if sys.platform == "win32" or platform == "xcb":
        return None
    if platform.startswith("wayland"):
        return ("Wayland lets no program grab a global key. Bind “wren-desktop --quick” to a key "
                "in your desktop's keyboard settings instead.")
    if sys.platform == "darwin":
        return ("macOS needs a helper Wren does not ship for global keys. Bind “wren-desktop "
                "--quick” to a key with the Shortcuts app instead.")
    return f"global hotkeys are not available on the “{platform}” display"


def _split(shortcut: str) -> tuple[Qt.KeyboardModifier, Qt.Key] | None:
    seq = QKeySequence.fromString(shortcut, QKeySequence.SequenceFormat.PortableText)
    if seq.isEmpty() or seq.count() != 1:
        return None
    combo = seq[0]  # type: ignore[index]  # QKeySequence has operator[] in PySide6; its stubs lack __getitem__
    return combo.keyboardModifiers(), combo.key()



def _app() -> QCoreApplication:
    """The running application (a hotkey is only set while the window's application runs)."""
    app = QCoreApplication.instance()
    if app is None:
        raise RuntimeError("a global shortcut needs the running application")
    return app


class _XErrorEvent(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int), ("display", ctypes.c_void_p), ("resourceid", ctypes.c_ulong),
        ("serial", ctypes.c_ulong), ("error_code", ctypes.c_ubyte), ("request_code", ctypes.c_ubyte),
        ("minor_code", ctypes.c_ubyte),
    ]


class _X11Grab:
    def __init__(self) -> None:
        path = ctypes.util.find_library("X11")
        if path is None:
            raise OSError("libX11 is not installed")
        x = ctypes.CDLL(path)
        x.XOpenDisplay.restype = ctypes.c_void_p
        x.XOpenDisplay.argtypes = [ctypes.c_char_p]
        x.XDefaultRootWindow.restype = ctypes.c_ulong
        x.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
        x.XStringToKeysym.restype = ctypes.c_ulong
        x.XStringToKeysym.argtypes = [ctypes.c_char_p]
        x.XKeysymToKeycode.restype = ctypes.c_ubyte
        x.XKeysymToKeycode.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
        x.XGrabKey.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_ulong, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        x.XUngrabKey.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_ulong]
        x.XSync.argtypes = [ctypes.c_void_p, ctypes.c_int]
        x.XConnectionNumber.argtypes = [ctypes.c_void_p]
        x.XPending.argtypes = [ctypes.c_void_p]
        x.XNextEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        x.XCloseDisplay.argtypes = [ctypes.c_void_p]
        self._handler_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_XErrorEvent))
        x.XSetErrorHandler.restype = ctypes.c_void_p
        x.XSetErrorHandler.argtypes = [ctypes.c_void_p]
        self.x = x
        self.display = x.XOpenDisplay(None)
        if not self.display:
            raise OSError("cannot open the X display")
        self.root = x.XDefaultRootWindow(self.display)
        self.grabs: list[tuple[int, int]] = []

    def fd(self) -> int:
        return self.x.XConnectionNumber(self.display)

    def grab(self, modifiers: Qt.KeyboardModifier, key: Qt.Key) -> str | None:
        name = QKeySequence(key).toString(QKeySequence.SequenceFormat.PortableText)
        keysym = self.x.XStringToKeysym((name.lower() if len(name) == 1 or name == "Space" else name).encode())
        keycode = self.x.XKeysymToKeycode(self.display, keysym) if keysym else 0
        if not keycode:
            return f"the key “{name}” has no X11 key code"
        mask = 0
        for qt_mod, x_mod in _X_MODS.items():
            if modifiers & qt_mod:
                mask |= x_mod
        errors: list[int] = []

        def on_error(_display, event) -> int:
            errors.append(event.contents.error_code)
            return 0

        handler = self._handler_type(on_error)
        previous = self.x.XSetErrorHandler(ctypes.cast(handler, ctypes.c_void_p))
        try:
            for lock in _X_LOCKS:
                self.x.XGrabKey(self.display, keycode, mask | lock, self.root, 1, 1, 1)
                self.grabs.append((keycode, mask | lock))
            self.x.XSync(self.display, 0)
        finally:
            self.x.XSetErrorHandler(previous)
        if errors:
            self.ungrab()
            return "another program already uses this shortcut" if _X_BAD_ACCESS in errors else f"X11 refused the shortcut (error {errors[0]})"
        return None

    def drain(self) -> bool:
        """Read pending X events; True if the hotkey was pressed."""
        event = ctypes.create_string_buffer(192)  # sizeof(XEvent) on 64-bit: 24 longs
        pressed = False
        while self.x.XPending(self.display):
            self.x.XNextEvent(self.display, event)
            if ctypes.c_int.from_buffer(event).value == _X_KEYPRESS:
                pressed = True
        return pressed

    def ungrab(self) -> None:
        for keycode, mask in self.grabs:
            self.x.XUngrabKey(self.display, keycode, mask, self.root)
        self.grabs.clear()
        self.x.XSync(self.display, 0)

    def close(self) -> None:
        self.ungrab()
        self.x.XCloseDisplay(self.display)


class _WindowsFilter(QAbstractNativeEventFilter):
    WM_HOTKEY = 0x0312

    def __init__(self, hotkey_id: int, callback) -> None:
        super().__init__()
        self.hotkey_id = hotkey_id
        self.callback = callback

    def nativeEventFilter(self, event_type, message):
        from ctypes import wintypes

        if bytes(event_type) == b"windows_generic_MSG":
            msg = wintypes.MSG.from_address(int(message))
            if msg.message == self.WM_HOTKEY and msg.wParam == self.hotkey_id:
                self.callback()
                return True, 0
        return False, 0


_WIN_MODS = {
    Qt.KeyboardModifier.AltModifier: 0x1, Qt.KeyboardModifier.ControlModifier: 0x2,
    Qt.KeyboardModifier.ShiftModifier: 0x4, Qt.KeyboardModifier.MetaModifier: 0x8,
}


class GlobalHotkey(QObject):
    """`set_shortcut` grabs a key combination system-wide; `activated` fires on each press."""

    activated = Signal()
    _WIN_ID = 0x5752  # "WR"

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.shortcut: str | None = None
        self._x11: _X11Grab | None = None
        self._notifier: QSocketNotifier | None = None
        self._win_filter: _WindowsFilter | None = None

    def set_shortcut(self, shortcut: str | None) -> str | None:
        """Grab `shortcut` (None turns the hotkey off). Returns why it could not, or None."""
        self.clear()
        if not shortcut:
            return None
        reason = unsupported_reason()
        if reason is not None:
            return reason
        parts = _split(shortcut)
        if parts is None or parts[1] in (Qt.Key.Key_unknown, 0):
            return f"“{shortcut}” is not a single key combination"
        modifiers, key = parts
        if not modifiers & (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier | Qt.KeyboardModifier.MetaModifier):
            return "a global shortcut needs Ctrl, Alt or the Super/Windows key, or it would steal typing"
        try:
            problem = self._grab_windows(modifiers, key) if sys.platform == "win32" else self._grab_x11(modifiers, key)
        except OSError as exc:
            problem = str(exc)
        if problem is None:
            self.shortcut = shortcut
        return problem

    def _grab_x11(self, modifiers: Qt.KeyboardModifier, key: Qt.Key) -> str | None:
        grab = _X11Grab()
        problem = grab.grab(modifiers, key)
        if problem is not None:
            grab.close()
            return problem
        self._x11 = grab
        self._notifier = QSocketNotifier(grab.fd(), QSocketNotifier.Type.Read, self)
        self._notifier.activated.connect(self._x11_ready)
        grab.drain()
        return None

    def _x11_ready(self, *_args) -> None:
        if self._x11 is not None and self._x11.drain():
            self.activated.emit()

    def _grab_windows(self, modifiers: Qt.KeyboardModifier, key: Qt.Key) -> str | None:
        user32 = ctypes.windll.user32  # type: ignore[attr-defined]
        mods = 0x4000  # MOD_NOREPEAT
        for qt_mod, win_mod in _WIN_MODS.items():
            if modifiers & qt_mod:
                mods |= win_mod
        vk = _windows_vk(key)
        if vk is None:
            return "this key cannot be a Windows hotkey"
        if not user32.RegisterHotKey(None, self._WIN_ID, mods, vk):
            return "another program already uses this shortcut"
        self._win_filter = _WindowsFilter(self._WIN_ID, self.activated.emit)
        _app().installNativeEventFilter(self._win_filter)
        return None

    def clear(self) -> None:
        if self._notifier is not None:
            self._notifier.setEnabled(False)
            self._notifier.deleteLater()
            self._notifier = None
        if self._x11 is not None:
            self._x11.close()
            self._x11 = None
        if self._win_filter is not None:
            _app().removeNativeEventFilter(self._win_filter)
            ctypes.windll.user32.UnregisterHotKey(None, self._WIN_ID)  # type: ignore[attr-defined]
            self._win_filter = None
        self.shortcut = None


def _windows_vk(key: Qt.Key) -> int | None:
    k = int(key)
    if int(Qt.Key.Key_A) <= k <= int(Qt.Key.Key_Z) or int(Qt.Key.Key_0) <= k <= int(Qt.Key.Key_9):
        return k  # Qt and Windows share ASCII codes for letters and digits
    if int(Qt.Key.Key_F1) <= k <= int(Qt.Key.Key_F24):
        return 0x70 + k - int(Qt.Key.Key_F1)
    return {int(Qt.Key.Key_Space): 0x20, int(Qt.Key.Key_Return): 0x0D, int(Qt.Key.Key_Tab): 0x09}.get(k)
