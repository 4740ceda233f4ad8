"""Wren.app asks for the microphone properly: macOS shows NSMicrophoneUsageDescription when
Wren first listens, and the hardened runtime blocks audio input without the entitlement."""

from __future__ import annotations

import plistlib
from pathlib import Path

MACOS = Path(__file__).resolve().parents[2] / "packaging" / "macos"


def test_the_app_says_why_it_listens_and_may_use_the_microphone():
    info = plistlib.loads((MACOS / "Info.plist").read_bytes())
    reason = info["NSMicrophoneUsageDescription"]
    assert "Wren" in reason and "not kept" in reason
    entitlements = plistlib.loads((MACOS / "entitlements.plist").read_bytes())
    assert entitlements["com.apple.security.device.audio-input"] is True
