"""A long paste's "Reading your message… n / N" line has a bar and the time left, estimated
from the rate measured while the model reads (issue 34)."""

from __future__ import annotations

import re

from PySide6.QtCore import Qt

from wren.desktop.chat.reading import ReadingRate, time_left_text
from wren.engine.records import Role

LONG_PASTE = " ".join(f"word{i}" for i in range(300))
LEFT = re.compile(r"^(about \d+ (s|min) left|almost done|estimating time left…)$")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_follows_the_measured_rate():
    clock = Clock()
    rate = ReadingRate(clock)
    rate.update(0, 3000)
    assert rate.seconds_left() is None  # nothing measured yet
    clock.now += 2.0
    rate.update(500, 3000)  # 250 tokens/s
    assert rate.seconds_left() == 10.0
    clock.now += 2.0
    rate.update(1500, 3000)  # 1,500 in 4 s: 375 tokens/s
    assert rate.seconds_left() == 4.0
    assert time_left_text(rate.seconds_left()) == "about 4 s left"
    assert time_left_text(None) == "estimating time left…"
    assert time_left_text(150) == "about 2 min left"
    assert time_left_text(0.2) == "almost done"


def test_the_window_shows_a_bar_and_the_time_left_while_reading(open_window, qtbot):
    window = open_window("The answer.", prefill_delay=0.15, delay=0.03)
    window.composer.edit.setPlainText(LONG_PASTE)
    seen: list[tuple[int, int, str]] = []

    def reading():
        widgets = window.chat.message_widgets()
        if not widgets or widgets[-1].role is not Role.ASSISTANT:
            return None
        progress = widgets[-1].reading_progress
        return progress if progress.isVisible() else None

    def record() -> bool:
        progress = reading()
        if progress is not None:
            seen.append((progress.bar.value(), progress.bar.maximum(), progress.left_label.text()))
        return len({s[0] for s in seen}) >= 2

    with qtbot.waitSignal(window.conversations.turn_finished, timeout=30000):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(record, timeout=15000)
        answer = window.chat.message_widgets()[-1]
        done, total = (int(g.replace(",", "")) for g in re.findall(r"[\d,]+", answer.status_label.text()))
        assert (answer.reading_progress.bar.value(), answer.reading_progress.bar.maximum()) == (done, total)
    assert all(LEFT.match(text) for _, _, text in seen)
    assert any(text.startswith("about") or text == "almost done" for _, _, text in seen[1:])  # a rate once measured
    assert not window.chat.message_widgets()[-1].reading_progress.isVisible()  # gone once the answer came
