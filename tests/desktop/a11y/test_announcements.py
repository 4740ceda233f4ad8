"""What the window announces (offscreen; the AT-SPI test hears the same through the bus):
an answer's start and its finished text once, a stopped answer, and a failure at once."""

from __future__ import annotations


def _heard(window) -> list[tuple[str, bool]]:
    said: list[tuple[str, bool]] = []
    window.conversations.announce.connect(lambda text, assertive: said.append((text, assertive)))
    return said


def test_an_answer_is_announced_once_at_its_start_and_end(open_window, send):
    window = open_window("Paris is the capital of France. It lies on the Seine.", delay=0.01)
    said = _heard(window)
    send(window, "Capital of France?")
    assert said == [("Wren is answering.", False),
                    ("Wren answered: Paris is the capital of France. It lies on the Seine.", False)]


def test_a_failed_answer_is_announced_at_once(open_window, send):
    def broken(prompt: str) -> str:
        raise RuntimeError("the model file went away")

    window = open_window(broken)
    said = _heard(window)
    send(window, "Hello?")
    assert said[-1][1] is True and said[-1][0].startswith("The answer failed:")
    assert "the model file went away" in said[-1][0]


def test_a_very_long_answer_is_cut_for_reading_with_a_pointer_to_the_rest(qapp, monkeypatch):
    from PySide6.QtWidgets import QWidget

    from wren.desktop import a11y

    captured = []
    monkeypatch.setattr(a11y.QAccessible, "updateAccessibility", staticmethod(lambda event: captured.append(event.message())))
    a11y.announce(QWidget(), "word " * 3000)
    assert len(captured[0]) < a11y.LONGEST + 40 and captured[0].endswith("The rest is in the chat.")


def test_a_refused_message_is_announced_at_once(open_window, qtbot):
    window = open_window()
    said = _heard(window)
    window.composer.edit.setPlainText("x" * 400_000)  # more than the model reads
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        window.composer.send_button.click()
    assert said and said[-1][1] is True and "Wren answered" not in said[-1][0]
