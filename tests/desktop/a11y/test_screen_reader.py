"""Wren through the accessibility API a screen reader uses: on Linux, AT-SPI under Xvfb on a
private D-Bus session with Debian's at-spi2-core, probed with pyatspi (python3-pyatspi) and
driven by X key events (xdotool) — the Debian packages are in tests/system/packages.txt.
Every interactive node shown has a name and a role; Tab goes round the window in a logical
order without a trap; a conversation driven by keys alone is announced as a reader hears it:
the answer's start, then its finished text once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
INTERACTIVE = {"push button", "toggle button", "check box", "radio button", "combo box", "text", "entry", "list",
               "list item", "menu item", "check menu item", "spin button", "slider", "link", "page tab"}
pytestmark = [pytest.mark.timeout(240), pytest.mark.slow, pytest.mark.xdist_group("screen-reader")]


def _missing() -> str | None:
    for program in ("xvfb-run", "dbus-run-session", "xdotool"):
        if shutil.which(program) is None:
            return f"{program} is not installed (tests/system/packages.txt)"
    if not Path("/usr/libexec/at-spi-bus-launcher").exists():
        return "at-spi2-core is not installed (tests/system/packages.txt)"
    probe = subprocess.run(["/usr/bin/python3", "-c", "import pyatspi"], capture_output=True)
    if probe.returncode != 0:
        return "python3-pyatspi is not installed (tests/system/packages.txt)"
    return None


def session(*args: str, **extra_env: str) -> dict:
    """One window under Xvfb with its own accessibility bus; the probe's findings."""
    reason = _missing()
    if reason is not None:
        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY", "DBUS_SESSION_BUS_ADDRESS")}
    env.update(extra_env)
    done = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1280x900x24", "dbus-run-session", "--",
                           "bash", str(HERE / "run_session.sh"), sys.executable, *args],
                          capture_output=True, text=True, timeout=200, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def unnamed(nodes: list[dict]) -> list[dict]:
    return [n for n in nodes if n["showing"] and (n["focusable"] or n["role"] in INTERACTIVE)
            and not n["name"].strip()]


def test_a_conversation_by_keys_alone_is_announced_and_every_control_is_named():
    tabs = ["Tab"] * 26
    result = session("keys", "type:What is the capital of France?", "Return", *tabs)
    said = [a["text"] for a in result["announcements"]]
    assert said == ["Wren is answering.", "Wren answered: Paris is the capital of France."]  # the text once, not token by token
    assert unnamed(result["nodes"]) == []
    roles = {n["role"] for n in result["nodes"] if n["showing"]}
    assert {"push button", "text", "list", "menu item"} <= roles
    focus = [step["focus"] for step in result["steps"][2:]]
    assert all(f is not None and f["name"].strip() for f in focus), focus  # every Tab lands somewhere named
    # Tab into the chat list lands on the list ("Conversations") or, once the open chat is its
    # current row (the list is read again every few seconds), on that row, said with its title
    names = ["Conversations" if f["role"] == "list item" else f["name"] for f in focus]
    # logical: composer controls, sidebar, header, the chat's messages, back to the message box
    order = ["Send message", "New chat", "Search chats", "Conversations", "Settings", "Copy message", "Message"]
    assert all(name in names for name in order), names
    assert [names.index(name) for name in order] == sorted(names.index(name) for name in order), names
    assert "Regenerate answer" in names[names.index("Copy message"):names.index("Message")]
    after = names[names.index("Message") + 1:]
    assert after and after[0] == names[0]  # no trap: the round starts again


def test_the_window_names_its_controls_before_any_chat():
    nodes = session("tree")["nodes"]
    assert unnamed(nodes) == []
    picker = [n for n in nodes if n["role"] == "combo box" and n["showing"]]
    assert [p["name"] for p in picker] == ["tiny"]  # on Linux Qt names a combo box by its choice...
    assert [p["labels"] for p in picker] == [["Model"]]  # ...and a reader says its label first
    menus = {n["name"] for n in nodes if n["role"] == "menu item"}
    assert {"File", "Edit", "Chat", "Voice", "Help", "Keyboard shortcuts", "Dictate"} <= menus


def test_the_quick_prompt_names_its_controls_and_takes_a_question_by_keys():
    result = session("keys", "focus:Wren quick prompt", "type:What is the capital of France?", "Return",
                     WREN_A11Y_QUICK="1")
    quick = [n for n in result["nodes"] if n["showing"] and n["role"] in INTERACTIVE]
    assert unnamed(result["nodes"]) == []
    assert {"Ask Wren", "Open in Wren"} <= {n["name"] for n in quick}, quick
    assert result["steps"][0]["focus"] == {"role": "text", "name": "Ask Wren"}  # the hotkey put focus in it
    said = [a["text"] for a in result["announcements"]]
    assert said and said[-1].startswith("Wren answered: Paris"), said


def says_only_its_value(node: dict) -> bool:
    """A combo box, spin box or check box that a reader would announce by its value alone:
    no label, or a label that is only its own name (Linux names a combo box by its choice)."""
    if node["role"] == "combo box":
        return not [label for label in node["labels"] if label.strip() and label != node["name"]]
    return not (node["name"].strip() or node["labels"])


def test_every_window_a_keyboard_user_reaches_says_what_each_choice_is():
    """The main window, every Settings page (shown or not), the Library, the Models window,
    Chat settings and the quick prompt: each combo box has a label that is not its choice,
    each spin box and check box a name; every shown control has a name."""
    nodes = session("tree", WREN_A11Y_OPEN="settings,library,models,chat-settings", WREN_A11Y_QUICK="1")["nodes"]
    windows = {n["window"] for n in nodes}
    assert {"Wren", "Settings", "Library", "Models", "Chat settings"} <= windows, windows
    assert "Ask Wren" in {n["name"] for n in nodes}  # the quick prompt's box
    assert unnamed(nodes) == []
    choices = [n for n in nodes if n["role"] in ("combo box", "spin button", "check box")]
    assert {n["role"] for n in choices} == {"combo box", "spin button", "check box"}
    assert len([n for n in choices if n["role"] == "combo box"]) >= 5  # the header's, Settings' and Chat settings'
    assert [(n["window"], n["role"], n["name"]) for n in choices if says_only_its_value(n)] == []
    # Settings → Safety's rules: a reader walks the table's cells, and the cells holding a choice say which
    cells = [n for n in nodes if n["role"] == "table cell" and "sent to" in n["name"]]
    assert cells and all(n["name"].split(": ")[-1] in ("Allow", "Warn", "Redact", "Block") for n in cells), cells[:3]
    # Checkable buttons are check boxes to Qt: each reads as a setting with its state ("Temporary chat,
    # check box, not checked"), its name the thing turned on, not a command
    header = {n["name"] for n in choices if n["window"] == "Wren" and n["role"] == "check box"}
    assert {"Temporary chat", "Dictate"} <= header


def test_a_tool_approval_is_announced_and_granted_by_keys_alone():
    result = session("keys", "type:Say hi with the tool", "Return", "tab-to:Allow echo once", "space",
                     WREN_A11Y_TOOL="1", WREN_A11Y_REPLY="The tool said hi.")
    said = [a["text"] for a in result["announcements"]]
    asked = "Wren wants to run the tool echo. Allow or deny it in the answer."
    assert asked in said and said[-1] == "Wren answered: The tool said hi.", said
    assert said.index(asked) < len(said) - 1
    reached = [step for step in result["steps"] if step["key"] == "tab-to:Allow echo once"]
    assert reached, result["steps"]  # Tab reached the card's Allow button: no mouse needed
    assert unnamed(result["nodes"]) == []
