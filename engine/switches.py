"""Wren's on/off environment settings (WREN_*), read one way everywhere: a value is trimmed
and lower-cased; "off", "0", "false" and "no" turn a setting off, "on", "1", "true" and "yes"
turn it on, and anything else (unset included) leaves the setting's default. The kernels'
C++ reads the same values (csrc/repack.cpp: wren::env_off, wren::env_on)."""

from __future__ import annotations

import os

OFF = frozenset({"off", "0", "false", "no"})
ON = frozenset({"on", "1", "true", "yes"})


def setting(name: str, default: str = "") -> str:
    """The setting's value, trimmed and lower-cased ("" or `default` when unset)."""
    return os.environ.get(name, default).strip().lower()


def off(name: str) -> bool:
    """Whether the setting turns something off (a default-on switch: on unless this)."""
    return setting(name) in OFF


def on(name: str) -> bool:
    """Whether the setting turns something on (a default-off switch: off unless this)."""
    return setting(name) in ON
