"""PySide6 6.12.0 on Python 3.11 drops a reference to None/True/False on every Qt call that
returns one; the interpreter aborts (none_dealloc) after a few thousand calls. Guard the pin
and the behaviour itself."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _pyside_requirement() -> str:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    (req,) = [d for d in deps if d.lower().startswith("pyside6-essentials")]
    return req


def test_pyproject_pins_a_pyside6_without_the_refcount_bug():
    req = _pyside_requirement()
    match = re.fullmatch(r"PySide6-Essentials==(\d+)\.(\d+)\.(\d+)", req.replace(" ", ""), re.I)
    assert match, f"PySide6-Essentials must be pinned exactly, got {req!r}"
    assert tuple(map(int, match.groups())) != (6, 12, 0), "6.12.0 aborts the interpreter on Python 3.11"


def test_installed_pyside6_matches_the_pin():
    req = _pyside_requirement()
    assert metadata.version("PySide6-Essentials") == req.split("==")[1]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="None is immortal from 3.12 on")
def test_qt_calls_returning_none_keep_none_alive(qapp):
    from PySide6.QtWidgets import QLabel

    label = QLabel()
    before = sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False)
    for _i in range(5000):
        label.setText("x")  # returns None
        label.isVisible()  # returns False
        label.isEnabled()  # returns True
    after = sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False)
    # Other threads may hold or drop a few references; a leak-per-call would be thousands.
    assert all(abs(a - b) < 500 for a, b in zip(after, before)), (before, after)
