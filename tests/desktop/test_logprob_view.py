"""Token probabilities in the chat view: hovering a token of an answer that kept its logprobs
shows the chosen token's probability and the 5 likeliest tokens; other answers show none."""

from __future__ import annotations

import math
import random
from dataclasses import fields

import pytest
from PySide6.QtCore import QEvent, QPoint
from PySide6.QtGui import QHelpEvent, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import QApplication, QToolTip

from wren.desktop.chat.probabilities import BadLogprobs, align, parse, percent
from wren.engine.inference.sampling import SamplingParams
from wren.engine.records import Role

ANSWER = "**Paris** is the capital of France, and [its](http://example.com/paris) river is the Seine."
TOKENS = ["**", "Paris", "**", " is", " the", " capital", " of", " France", ",", " and", " [", "its",
          "](", "http", "://", "example", ".com", "/paris", ")", " river", " is", " the", " Se", "ine", "."]
# the chosen token's probability; " capital" and " Se" are the unsure ones
PROBS = {" capital": 0.42, " Se": 0.08}
ALTERNATIVES = {" capital": [(" capital", 0.42), (" city", 0.31), (" heart", 0.12), (" seat", 0.06), (" centre", 0.04)]}


def _logprobs() -> list[dict]:
    """What the engine stores under the answer's metadata key "logprobs"."""
    out = []
    for n, token in enumerate(TOKENS):
        p = PROBS.get(token, 0.97)
        top = ALTERNATIVES.get(token) or [(token, p), ("x", (1 - p) / 2), ("y", (1 - p) / 4)]
        out.append({"token": token, "id": 100 + n, "logprob": math.log(p),
                    "top": [{"token": t, "id": 100 + n if t == token else 900 + k, "logprob": math.log(q)}
                            for k, (t, q) in enumerate(top)]})
    return out


def _answer(window):
    return [w for w in window.chat.message_widgets() if w.role is Role.ASSISTANT][-1]


def _stored_answer(open_window, send, arun, *, with_logprobs: bool = True):
    window = open_window(ANSWER)
    send(window, "What is the capital of France?")
    cid = window.conversations.current_id
    answer = arun(window.engine.conversations.messages(cid))[-1]
    assert answer.content == ANSWER
    if with_logprobs:  # as the engine stores them for an answer asked with logprobs=5
        arun(window.engine.db(window.engine.store.update_message, answer.id,
                               meta={**answer.meta, "logprobs": _logprobs()}))
    window.conversations.new_chat()
    arun(window.conversations.open(cid))
    return window, _answer(window)


def _point_on(widget, word: str):
    """The viewport and a point in the middle of the first character of `word` as shown (found in
    the rendered text itself, not through the matching under test)."""
    for segment in widget.body.segments():
        view = getattr(segment, "body", segment)  # a code block's text view, or the prose itself
        shown = view.document().toRawText()
        at = shown.find(word)
        if at < 0:
            continue
        cursor = QTextCursor(view.document())
        cursor.setPosition(at)
        left = view.cursorRect(cursor)
        cursor.setPosition(at + 1)
        right = view.cursorRect(cursor)
        return view, QPoint((left.x() + right.x()) // 2, left.center().y())
    raise AssertionError(f"{word!r} is not shown")


def _hover(qtbot, view, point) -> str:
    QToolTip.hideText()
    event = QHelpEvent(QEvent.Type.ToolTip, point, view.viewport().mapToGlobal(point))
    QApplication.sendEvent(view.viewport(), event)
    qtbot.wait(20)
    return QToolTip.text() if QToolTip.isVisible() else ""


def test_hovering_a_token_shows_its_probability_and_the_alternatives(open_window, send, arun, qtbot):
    window, widget = _stored_answer(open_window, send, arun)
    view, point = _point_on(widget, "capital")
    tip = _hover(qtbot, view, point)
    assert "<b>·capital</b>" in tip and "42.0%" in tip  # the chosen token (spaces shown as ·)
    for alternative, share in [("·city", "31.0%"), ("·heart", "12.0%"), ("·seat", "6.0%"), ("·centre", "4.0%")]:
        assert alternative in tip and share in tip
    assert "The 5 likeliest tokens there" in tip
    assert tip.index("·city") < tip.index("·heart") < tip.index("·centre")  # best first

    # after Markdown markup the render dropped (bold, a link's URL): still the right token
    view, point = _point_on(widget, "Seine")
    assert "<b>·Se</b>" in _hover(qtbot, view, point) and "8.0%" in QToolTip.text()
    view, point = _point_on(widget, "river")
    tip = _hover(qtbot, view, point)
    assert "<b>·river</b>" in tip and "97.0%" in tip
    view, point = _point_on(widget, "Paris")
    assert "<b>Paris</b>" in _hover(qtbot, view, point)


def test_an_answer_without_logprobs_shows_no_probability_tooltip(open_window, send, arun, qtbot):
    window, widget = _stored_answer(open_window, send, arun, with_logprobs=False)
    assert not widget.probabilities.attached
    view, point = _point_on(widget, "capital")
    tip = _hover(qtbot, view, point)
    assert "%" not in tip and "likeliest" not in tip
    assert widget.probabilities.last_tip is None


def test_the_toggle_is_saved_and_underlines_unsure_tokens(open_window, send, arun, qtbot):
    window, widget = _stored_answer(open_window, send, arun)
    action = window.conversations.probabilities_action
    assert action in window.menuBar().actions()[2].menu().actions()  # Chat ▸ Show token probabilities
    assert not action.isChecked()

    def underline_at(word: str) -> QTextCharFormat.UnderlineStyle:
        view, _ = _point_on(widget, word)
        cursor = QTextCursor(view.document())
        cursor.setPosition(view.document().toRawText().find(word) + 1)
        return cursor.charFormat().underlineStyle()

    none = QTextCharFormat.UnderlineStyle.NoUnderline
    assert underline_at("capital") == none
    action.setChecked(True)
    qtbot.waitUntil(lambda: widget.probabilities.marked, timeout=3000)
    assert underline_at("capital") == QTextCharFormat.UnderlineStyle.DotLine  # 42%: unsure
    assert underline_at("Seine") == QTextCharFormat.UnderlineStyle.DotLine  # 8%
    assert underline_at("France") == none  # 97%: sure
    qtbot.waitUntil(lambda: arun(window.engine.settings.get("chat.token_probabilities")) is True, timeout=3000)

    action.setChecked(False)
    widget = _answer(window)
    assert underline_at("capital") == none
    qtbot.waitUntil(lambda: _point_on(widget, "capital")[1].x() > 0, timeout=3000)  # laid out again
    view, point = _point_on(widget, "capital")
    assert "·capital" in _hover(qtbot, view, point)  # the hover stays: the answer kept them
    qtbot.waitUntil(lambda: arun(window.engine.settings.get("chat.token_probabilities")) is False, timeout=3000)


def test_the_saved_choice_is_restored_on_start(open_window, make_engine, arun):
    engine = make_engine("Hi.")
    arun(engine.settings.set("chat.token_probabilities", True))
    window = open_window(engine=engine)
    assert window.conversations.probabilities_action.isChecked()


@pytest.mark.skipif("logprobs" not in {f.name for f in fields(SamplingParams)},
                    reason="the engine's SamplingParams has no logprobs field yet")
def test_with_the_toggle_on_new_answers_are_asked_for_logprobs(open_window, send, arun, qtbot):
    window = open_window("Fine, thanks.")
    window.conversations.probabilities_action.setChecked(True)
    send(window, "How are you?")
    answer = arun(window.engine.conversations.messages(window.conversations.current_id))[-1]
    assert answer.sampling.get("logprobs") == 5
    kept = answer.meta.get("logprobs")
    assert isinstance(kept, list) and "".join(e["token"] for e in kept) == "Fine, thanks."
    widget = _answer(window)  # straight from the stream: the hover is there without reopening
    qtbot.waitUntil(lambda: _point_on(widget, "thanks")[1].x() > 0, timeout=3000)
    view, point = _point_on(widget, "thanks")
    tip = _hover(qtbot, view, point)
    at, under = 0, None  # the stored token whose text covers the "t" of "thanks"
    for entry in kept:
        if at <= "Fine, thanks.".index("thanks") < at + len(entry["token"]):
            under = entry
        at += len(entry["token"])
    assert f"<b>{under['token'].replace(' ', '·')}</b>" in tip and f"token {under['id']}" in tip
    assert "100%" in tip  # the scripted model puts all its weight on its script
    window.conversations.probabilities_action.setChecked(False)
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        window.conversations.regenerate(answer.id)
    again = arun(window.engine.conversations.messages(window.conversations.current_id))[-1]
    assert again.id != answer.id and not again.sampling.get("logprobs")


# -- the pieces ------------------------------------------------------------------------


def test_tokens_are_placed_in_the_text_even_where_they_do_not_join_to_it():
    entries = parse(_logprobs(), ANSWER)
    assert [ANSWER[e.start:e.end] for e in entries] == TOKENS
    # a stop string cut from the text, and a half-character token ("\ufffd")
    raw = [{"token": t, "id": 1, "logprob": -0.1, "top": []} for t in ["Ol", "\ufffd", "é", " done", "</s>"]]
    placed = [(e.token, "Olé done"[e.start:e.end]) for e in parse(raw, "Olé done")]
    assert placed == [("Ol", "Ol"), ("\ufffd", ""), ("é", "é"), (" done", " done"), ("</s>", "")]


@pytest.mark.parametrize("raw, says", [
    ({"token": "a"}, "not a list"),
    ([{"token": 3, "logprob": -1.0}], "token 0 has no text"),
    ([{"token": "a", "logprob": "high"}], "token 0 has no usable logprob"),
    ([{"token": "a", "logprob": -1.0, "top": [{"token": "b", "logprob": 2.0}]}], "alternative 0 of 'a'"),
    ([{"token": "a", "logprob": -1.0, "top": "b"}], "alternatives of 'a' are str"),
])
def test_unreadable_logprobs_are_refused_with_what_is_wrong(raw, says):
    with pytest.raises(BadLogprobs, match=says):
        for entry in parse(raw, "a"):
            entry.alternatives()  # read only when the token is hovered


def test_shown_text_is_matched_to_the_markdown_it_came_from():
    raw = "Use `print` in **python**:\n\n```python\nprint(1)\n```\n- one & two"
    shown = "Use print in python:\u2029"
    mapping, end = align(shown, raw)
    assert "".join(raw[k] for k in mapping if k >= 0) == "Use print in python:\n"
    code, end = align("print(1)", raw, end)
    assert code[0] == raw.index("print(1)")  # not the "p" of the fence's "python"
    items, _ = align("one & two", raw, end)
    assert items[0] == raw.index("one")
    # markup on every other word, links, lists, entities: every shown character finds its own
    words = ["the", "**bold**", "`code`", "[link](http://example.com/a_b)", "*it*", "&amp;", "plain"]
    rnd = random.Random(7)
    raw = "\n\n".join(("- " if p % 3 == 0 else "") + " ".join(rnd.choice(words) for _ in range(40)) for p in range(30))
    doc = QTextDocument()
    doc.setMarkdown(raw)
    shown = doc.toRawText()
    mapping, _ = align(shown, raw)
    matched = [(shown[i], raw[k]) for i, k in enumerate(mapping) if k >= 0]
    assert len(matched) == len(shown)
    assert all(a == b or ((a.isspace() or a == "\u2029") and b.isspace()) for a, b in matched)
    assert mapping == sorted(mapping)  # in order: nothing matched far ahead and then back
    assert percent(1.0) == "100%" and percent(0.0004) == "<0.1%" and percent(0.4219) == "42.2%"
