"""How long a resident engine keeps its model loaded after a question (`wren ask`'s
keep-alive): the setting's name, its default and bounds, and how a value reads as seconds.

The terminal front end starts and asks the resident engines (engine/terminal/); the
engine's settings read and write the keep-alive, so these few names live below both."""

from __future__ import annotations

from typing import Any

KEEP_ALIVE_ENV = "WREN_KEEP_ALIVE"
KEEP_ALIVE_SETTING = "cli.keep_alive"
DEFAULT_KEEP_ALIVE = 300.0
# The longest keep-alive: a week. A longer one (1e400 reads as infinity) would be an engine
# that never ends, holding its model's memory; `--keep-alive` over it is refused.
MAX_KEEP_ALIVE = 7 * 24 * 3600.0


def seconds(value: Any) -> float:
    """A keep-alive (the `cli.keep_alive` setting's, or a question's) as seconds: the
    default where it is not a number, at most MAX_KEEP_ALIVE."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return DEFAULT_KEEP_ALIVE
    return min(max(0.0, number), MAX_KEEP_ALIVE) if number == number else DEFAULT_KEEP_ALIVE
