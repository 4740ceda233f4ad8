"""A start-up check for packaged builds: `WREN_DESKTOP_SMOKE=QUESTION wren-desktop`.

The window starts as usual; once the model is loaded the question goes in as if typed and
sent (through the safety check), and when the answer is stored Wren prints it and quits.
Each step is one JSON line on standard output with the seconds since `wren-desktop`
began: {"smoke": "window"|"model"|"answer"|"failed", "seconds": ..., ...}. The exit status
is 0 with an answer, 1 without one. Packaging tests run the frozen bundle this way
(offscreen); nothing changes when the variable is unset.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer

from wren.engine.events import Finished

if TYPE_CHECKING:
    from .app import WrenApp

SMOKE_ENV = "WREN_DESKTOP_SMOKE"
TIMEOUT_ENV = "WREN_DESKTOP_SMOKE_TIMEOUT"  # seconds; 300 when unset


class Smoke(QObject):
    def __init__(self, wren: WrenApp, question: str, began: float, timeout_s: float = 300.0):
        super().__init__(wren)
        self.wren = wren
        self.question = question
        self.began = began
        self.status = 1
        self._reported = False  # one outcome only: the answer, or the first failure
        self._window_ready = False
        self._model_ready = False
        self._asked = False
        models = wren.window.models
        models.loaded.connect(self._loaded)
        models.load_failed.connect(lambda text: self._fail(f"no model loaded: {text}"))
        wren.window.conversations.turn_finished.connect(self._finished)
        self._timer = QTimer(self, singleShot=True, interval=int(timeout_s * 1000))
        self._timer.timeout.connect(lambda: self._fail(f"no answer within {timeout_s:g} s"))
        self._timer.start()

    def _say(self, step: str, **extra) -> None:
        print(json.dumps({"smoke": step, "seconds": round(time.monotonic() - self.began, 3), **extra}), flush=True)

    def window_shown(self) -> None:
        """The window is up and takes input (the model may still be loading)."""
        self._window_ready = True
        self._say("window", visible=self.wren.window.isVisible())
        self._ask()

    def _loaded(self, status) -> None:
        self._model_ready = True
        self._say("model", name=status.name, backend=status.backend)
        self._ask()

    def _ask(self) -> None:
        if self._window_ready and self._model_ready and not self._asked:
            self._asked = True
            self.wren.window.gate.submit(self.question)

    def _finished(self, finished: Finished) -> None:
        self.wren.tasks.run(self._report(finished), what="reporting the smoke answer")

    async def _report(self, finished: Finished) -> None:
        if finished.message_id is None:
            self._fail(f"the turn ended without an answer ({finished.reason.value})")
            return
        message = await self.wren.engine.conversations.message(finished.message_id)
        if self._reported:
            return
        self._reported = True
        self._timer.stop()
        self.status = 0 if message.content.strip() else 1
        self._say("answer", text=message.content, reason=finished.reason.value)
        self.wren.quit()

    def _fail(self, why: str) -> None:
        # the time-out stops too: left running, it would report again (and quit) later
        self._timer.stop()
        if self._reported:
            return
        self._reported = True
        self.status = 1
        self._say("failed", error=why)
        self.wren.quit()

    def cancel(self) -> None:
        """Stop waiting: no report, no quit (a smoke run given up before it began)."""
        self._timer.stop()
        self._reported = True


def from_environment(wren: WrenApp, began: float, environ=None) -> Smoke | None:
    import os

    env = os.environ if environ is None else environ
    question = env.get(SMOKE_ENV, "").strip()
    if not question:
        return None
    try:
        timeout_s = float(env.get(TIMEOUT_ENV) or 300)
    except ValueError:
        print(f"{TIMEOUT_ENV} must be a number of seconds, not {env.get(TIMEOUT_ENV)!r}", file=sys.stderr)
        timeout_s = 300.0
    return Smoke(wren, question, began, timeout_s)
