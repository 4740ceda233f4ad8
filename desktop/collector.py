"""Python's cycle collector, run on the window's thread only.

Python collects cycles in whichever thread happens to allocate, and the engine's worker
threads allocate the most. A cycle that holds Qt objects, collected there, destroys them
in that thread, where their destructors wait for locks the window's thread holds while it
waits for Python: the window freezes for good. So the window's process turns automatic
collection off and collects here, on a timer on the window's thread, as often as the
collector's own thresholds ask.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 250  # cycles wait at most this long; a young collection takes well under 1 ms


class WindowThreadCollector(QObject):
    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS):
        super().__init__(parent)
        self._timer = QTimer(self, interval=interval_ms)
        self._timer.timeout.connect(self.collect_due)
        self._was_enabled = gc.isenabled()

    def start(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()
        if self._was_enabled:
            gc.enable()

    def collect_due(self) -> int | None:
        """The oldest generation whose count passed its threshold is collected (with the
        younger ones, as Python itself does); which one, or None."""
        counts, thresholds = gc.get_count(), gc.get_threshold()
        for generation in (2, 1, 0):
            if thresholds[generation] and counts[generation] >= thresholds[generation]:
                gc.collect(generation)
                return generation
        return None
