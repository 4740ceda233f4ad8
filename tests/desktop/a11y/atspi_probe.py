"""What a screen reader sees of Wren, through the real accessibility API (AT-SPI, with
Debian's pyatspi; run by run_session.sh with the system's Python, not Wren's).

    atspi_probe.py tree                 every node of Wren's window: role, name, states
    atspi_probe.py keys KEY...          press keys (xdotool names: Tab, Return, ctrl+n, or
                                        type:TEXT, focus:WINDOW TITLE, or tab-to:NAME) one by one; what got focus after each, and
                                        every announcement, until "Wren answered" or the end;
                                        then the tree as `tree` gives it

Prints one JSON object."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pyatspi
from gi.repository import GLib

APP_NAME = "wren-desktop"
INTERACTIVE = {"push button", "toggle button", "check box", "radio button", "combo box", "text", "entry",
               "list", "list item", "menu item", "check menu item", "spin button", "slider", "link",
               "tree", "table", "page tab", "password text", "scroll pane"}


def find_app(timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        desktop = pyatspi.Registry.getDesktop(0)
        for i in range(desktop.childCount):
            app = desktop.getChildAtIndex(i)
            if app is not None and app.name == APP_NAME:
                return app
        time.sleep(0.2)
    raise SystemExit(f"no application named {APP_NAME!r} on the accessibility bus")


def labels(node) -> list[str]:
    """The names of the nodes that label this one (AT-SPI's labelled-by relation), as a
    reader says them before the control's own name (Orca does for a combo box)."""
    found = []
    try:
        relations = node.getRelationSet()
    except Exception:  # a node gone meanwhile
        return found
    for relation in relations:
        if relation.getRelationType() == pyatspi.RELATION_LABELLED_BY:
            for i in range(relation.getNTargets()):
                target = relation.getTarget(i)
                if target is not None and (target.name or "").strip():
                    found.append(target.name.strip())
    return found


def describe(node) -> dict:
    states = node.getState().getStates()
    return {"role": node.getRoleName(), "name": node.name or "", "description": node.description or "",
            "labels": labels(node), "window": window_of(node),
            "focusable": pyatspi.STATE_FOCUSABLE in states, "showing": pyatspi.STATE_SHOWING in states,
            "enabled": pyatspi.STATE_ENABLED in states, "focused": pyatspi.STATE_FOCUSED in states}


def window_of(node) -> str:
    """The title of the window (or dialog) the node is in."""
    try:
        while node is not None and node.getRoleName() not in ("frame", "dialog", "window"):
            node = node.parent
        return (node.name or "") if node is not None else ""
    except Exception:
        return ""


def walk(node, path: str = "", out: list | None = None) -> list:
    out = [] if out is None else out
    entry = describe(node)
    entry["path"] = path
    out.append(entry)
    for i in range(node.childCount):
        child = node.getChildAtIndex(i)
        if child is not None:
            walk(child, f"{path}/{i}", out)
    return out


def tree() -> dict:
    return {"nodes": walk(find_app())}


def _command(step: str) -> list[str]:
    if step.startswith("focus:"):  # a window by its title, e.g. focus:Wren quick prompt
        found = subprocess.run(["xdotool", "search", "--name", step[6:]], capture_output=True, text=True,
                               timeout=20).stdout.split()
        return ["xdotool", "windowfocus", "--sync", found[-1]] if found else ["true"]
    if step.startswith("type:"):
        return ["xdotool", "type", "--delay", "15", step[5:]]
    return ["xdotool", "key", step]


def _focus_after_each(log: list[dict], focus: list[dict]) -> None:
    """The focus right after each key: the last focus event before the next key."""
    for n, entry in enumerate(log):
        end = log[n + 1]["at"] if n + 1 < len(log) else float("inf")
        during = [f for f in focus if entry["at"] <= f["at"] < end]
        entry["focus"] = {k: during[-1][k] for k in ("role", "name")} if during else None


def keys(steps: list[str], settle: float = 0.4, wait_answer: float = 30.0) -> dict:
    app = find_app()
    window = subprocess.run(["xdotool", "search", "--sync", "--name", "^Wren"], capture_output=True, text=True,
                            timeout=20).stdout.split()
    if window:
        subprocess.run(["xdotool", "windowfocus", "--sync", window[0]], capture_output=True, timeout=10)
    focus: list[dict] = []
    announcements: list[dict] = []
    log: list[dict] = []
    started = time.monotonic()

    def on_focus(event) -> None:
        if event.detail1 == 1 and event.source is not None:
            focus.append({"at": round(time.monotonic() - started, 3), **describe(event.source)})

    def on_announcement(event) -> None:
        announcements.append({"at": round(time.monotonic() - started, 3), "text": str(event.any_data),
                              "politeness": event.detail1})

    pyatspi.Registry.registerEventListener(on_focus, "object:state-changed:focused")
    pyatspi.Registry.registerEventListener(on_announcement, "object:announcement")
    queue = list(steps)
    tabs: dict[str, int] = {}

    def press() -> bool:
        if not queue:
            GLib.timeout_add(200, finish)
            return False
        step = queue.pop(0)
        before = len(focus)
        if step.startswith("tab-to:"):  # Tab until NAME has focus (at most 60 presses), as a reader's user does
            if focus and focus[-1]["name"] == step[7:]:
                log.append({"key": step, "at": round(time.monotonic() - started, 3), "focus_before": before})
                GLib.timeout_add(int(settle * 1000), press)
                return False
            tabs[step] = tabs.get(step, 0) + 1
            if tabs[step] <= 60:
                queue.insert(0, step)
            subprocess.run(["xdotool", "key", "Tab"], capture_output=True, timeout=30)
            GLib.timeout_add(int(settle * 1000), press)
            return False
        subprocess.run(_command(step), capture_output=True, timeout=30)
        log.append({"key": step, "at": round(time.monotonic() - started, 3), "focus_before": before})
        GLib.timeout_add(int(settle * 1000), press)
        return False

    deadline = [None]

    def finish() -> bool:
        answered = any(a["text"].startswith(("Wren answered", "The answer failed")) for a in announcements)
        asked = any(s == "Return" for s in steps)
        if asked and not answered:
            if deadline[0] is None:
                deadline[0] = time.monotonic() + wait_answer
            if time.monotonic() < deadline[0]:
                GLib.timeout_add(200, finish)
                return False
        pyatspi.Registry.stop()
        return False

    GLib.timeout_add(500, press)
    pyatspi.Registry.start()
    _focus_after_each(log, focus)
    time.sleep(0.5)  # the answer's buttons are laid out
    return {"steps": log, "announcements": announcements, "focus_events": len(focus), "nodes": walk(app)}


def main() -> None:
    mode, *rest = sys.argv[1:] or ["tree"]
    result = tree() if mode == "tree" else keys(rest)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
