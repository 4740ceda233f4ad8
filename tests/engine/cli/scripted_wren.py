"""`wren` in a child process, answering with the ScriptedBackend instead of a real model.

    python scripted_wren.py chat --no-save

The data folder is $WREN_HOME (with the tiny model chosen, see conftest.tiny_chosen).
The answer echoes the last user message ("echo: TEXT"), after the system prompt when one
was given ("[system: TEXT] ") and after $WREN_TEST_REPLY when that is set; each token
takes $WREN_TEST_DELAY seconds (default 0), each prompt's prefill $WREN_TEST_PREFILL_DELAY (a
slow first token), loading the model $WREN_TEST_LOAD_DELAY. With $WREN_TEST_CTTY set,
standard input (a pty,
in a new session) becomes the controlling terminal.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)


def reply(prompt: str) -> str:
    turns = _TURN.findall(prompt)
    user = next((text for role, text in reversed(turns) if role == "user"), "")
    system = next((text for role, text in turns if role == "system"), "")
    prefix = os.environ.get("WREN_TEST_REPLY", "")
    return prefix + (f"[system: {system}] " if system else "") + f"echo: {user}"


def main() -> int:
    if os.environ.get("WREN_TEST_CTTY"):
        # Started in a session of its own on a pty: make that its controlling terminal, so
        # Ctrl+C typed there sends SIGINT as a real terminal does.
        import fcntl
        import termios

        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    # As the `wren` command's launcher does (engine/terminal/launch.py): Ctrl+C's signal held
    # before the imports, so their threads never take it.
    from wren.engine.terminal import sigint

    sigint.hold()
    from wren.engine.api import Engine
    from wren.engine.inference.backends.scripted import ScriptedBackend
    from wren.engine.terminal import main as cli

    backend = ScriptedBackend(reply, delay=float(os.environ.get("WREN_TEST_DELAY", "0")),
                              prefill_delay=float(os.environ.get("WREN_TEST_PREFILL_DELAY", "0")))
    load_delay = float(os.environ.get("WREN_TEST_LOAD_DELAY", "0"))
    if load_delay:
        import time

        quick = backend.load

        def slow_load(*args, **kwargs):
            time.sleep(load_delay)
            return quick(*args, **kwargs)

        backend.load = slow_load
    original = Engine.open.__func__

    def open_(cls, home=None, **kwargs):
        kwargs["backend_factory"] = lambda name: backend
        return original(cls, home, **kwargs)

    Engine.open = classmethod(open_)
    return cli.main(sys.argv[1:], held=True)


if __name__ == "__main__":
    sys.exit(main())
