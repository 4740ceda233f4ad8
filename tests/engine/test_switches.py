"""engine.switches: every WREN_* on/off setting reads the same values the same way."""

from __future__ import annotations

import pytest

from wren.engine import switches


@pytest.mark.parametrize("value", ["off", "0", "false", "no", " OFF ", "No\n"])
def test_off_values_turn_a_default_on_switch_off(monkeypatch, value):
    monkeypatch.setenv("WREN_TEST_SWITCH", value)
    assert switches.off("WREN_TEST_SWITCH") and not switches.on("WREN_TEST_SWITCH")


@pytest.mark.parametrize("value", ["on", "1", "true", "yes", " True", "YES "])
def test_on_values_turn_a_default_off_switch_on(monkeypatch, value):
    monkeypatch.setenv("WREN_TEST_SWITCH", value)
    assert switches.on("WREN_TEST_SWITCH") and not switches.off("WREN_TEST_SWITCH")


@pytest.mark.parametrize("value", [None, "", "map", "sdpa", "2"])
def test_anything_else_leaves_the_default(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("WREN_TEST_SWITCH", raising=False)
    else:
        monkeypatch.setenv("WREN_TEST_SWITCH", value)
    assert not switches.on("WREN_TEST_SWITCH") and not switches.off("WREN_TEST_SWITCH")
    assert switches.setting("WREN_TEST_SWITCH") == (value or "").strip().lower()


def test_the_engine_reads_no_switch_by_hand():
    """No module spells the off or on values out again (they drifted apart before: one read
    "no" as off, another did not)."""
    from pathlib import Path

    root = Path(switches.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.name != "switches.py" and ('"false", "no"' in text or '"true", "yes"' in text
                                           or '"no", "false"' in text):
            offenders.append(str(path.relative_to(root)))
    assert not offenders, offenders
