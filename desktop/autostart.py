"""Starting Wren when the user logs in, in the tray (`wren-desktop --hidden`).

- Linux and other XDG desktops: a desktop entry in `$XDG_CONFIG_HOME/autostart` (else
  `~/.config/autostart`), named after the app's own id (packaging/linux), as the XDG
  Autostart specification reads it.
- macOS: a launch agent, `~/Library/LaunchAgents/io.github.wren_assistant.Wren.plist`
  with RunAtLoad; launchd reads it at the next login.
- Windows: not offered yet. The equivalent is a value named "Wren" under
  `HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run` holding the quoted path of
  `wren-desktop.exe` followed by `--hidden`, or a shortcut in the Startup folder.

The file is the setting: the checkbox shows whether it exists, and turning it off deletes it.
"""

from __future__ import annotations

import os
import plistlib
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

APP_ID = "io.github.wren_assistant.Wren"  # packaging/linux: the desktop entry's id
HIDDEN_FLAG = "--hidden"  # desktop/app.py: start in the tray (the window shows without one)
_EXEC_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")


def launch_command() -> list[str]:
    """How this Wren is started: the bundle's executable, the `wren-desktop` script beside
    this Python (a virtual environment) or on PATH, else `python -m desktop.app`."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    beside = Path(sys.executable).parent / ("wren-desktop.exe" if os.name == "nt" else "wren-desktop")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("wren-desktop")
    if found:
        return [found]
    return [sys.executable, "-m", "wren.desktop.app"]


def exec_line(args: list[str]) -> str:
    """`args` as a desktop entry's Exec value: arguments with reserved characters quoted,
    `"`, `` ` ``, `$` and `\\` escaped inside the quotes, `%` doubled, and then the backslashes
    escaped once more, since Exec is itself a string value."""
    out = []
    for arg in args:
        arg = arg.replace("%", "%%")
        if any(ch in _EXEC_RESERVED for ch in arg) or not arg:
            arg = '"' + "".join("\\" + ch if ch in '"`$\\' else ch for ch in arg) + '"'
        out.append(arg)
    return " ".join(out).replace("\\", "\\\\")


class Autostart:
    """The login item for one platform; `path` is None where Wren cannot add one."""

    def __init__(self, platform: str | None = None, environ: Mapping[str, str] | None = None,
                 home: Path | None = None):
        self.platform = platform or sys.platform
        env = os.environ if environ is None else environ
        home = home or Path(env.get("HOME") or Path.home())
        self.path: Path | None
        if self.platform.startswith("win"):
            self.path = None
        elif self.platform == "darwin":
            self.path = home / "Library" / "LaunchAgents" / f"{APP_ID}.plist"
        else:
            config = env.get("XDG_CONFIG_HOME", "")
            base = Path(config) if config and Path(config).is_absolute() else home / ".config"
            self.path = base / "autostart" / f"{APP_ID}.desktop"

    @property
    def supported(self) -> bool:
        return self.path is not None

    @property
    def why_not(self) -> str:
        return "" if self.supported else "Starting Wren when you log in is not offered on Windows yet."

    def enabled(self) -> bool:
        return self.path is not None and self.path.is_file()

    def set_enabled(self, on: bool, command: list[str] | None = None) -> None:
        """Write or delete the login item. Raises OSError when the folder cannot be written
        and RuntimeError where the platform has none."""
        if self.path is None:
            raise RuntimeError(self.why_not)
        if not on:
            self.path.unlink(missing_ok=True)
            return
        args = [*(command or launch_command()), HIDDEN_FLAG]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.platform == "darwin":
            data = plistlib.dumps({"Label": APP_ID, "ProgramArguments": args, "RunAtLoad": True,
                                   "ProcessType": "Interactive"})
            self._write(data)
        else:
            self._write(self.desktop_entry(args).encode("utf-8"))

    @staticmethod
    def desktop_entry(args: list[str]) -> str:
        return (
            "[Desktop Entry]\n"
            "Type=Application\n"
            "Name=Wren\n"
            "Comment=Start Wren in the tray when you log in\n"
            f"Exec={exec_line(args)}\n"
            f"Icon={APP_ID}\n"
            "Terminal=false\n"
            "X-GNOME-Autostart-enabled=true\n"
        )

    def _write(self, data: bytes) -> None:
        assert self.path is not None
        tmp = self.path.with_name(f".{self.path.name}.partial")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)
