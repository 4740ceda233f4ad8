"""The streaming message body: cheap appends however long the answer, same result as a
one-shot render, rendered Markdown and highlighted code."""

from __future__ import annotations

import time

from PySide6.QtGui import QGuiApplication

from wren.desktop.bridge import FLUSH_MS, TurnStream
from wren.desktop.chat.body import MarkdownBody
from wren.desktop.chat.segments import ProseSegment
from wren.engine.events import Delta, Finished, FinishReason, Started, Usage


def _tokens(n: int) -> list[str]:
    out = []
    for i in range(n):
        if i % 400 == 100:
            out.append("\n\n```python\n")
        elif i % 400 == 160:
            out.append("\n```\n\n")
        elif i % 400 > 100 and i % 400 < 160:
            out.append(f"x{i} = {i}\n" if i % 3 == 0 else "y ")
        else:
            out.append(f"word{i} " if i % 37 else "**bold** \n")
    return out


def test_twelve_thousand_appends_cost_the_same_at_the_end_as_at_the_start(qtbot):
    body = MarkdownBody()
    qtbot.addWidget(body)
    body.resize(700, 400)
    body.show()
    body.begin_stream()
    tokens = _tokens(12_000)
    timings = []
    for token in tokens:
        started = time.perf_counter()
        body.append(token)
        timings.append(time.perf_counter() - started)
    body.finish()
    assert body.text() == "".join(tokens)
    first, last = sorted(timings[:2000]), sorted(timings[-2000:])
    median_first, median_last = first[1000], last[1000]
    # O(1) per append: no re-render of the whole message as it grows.
    assert median_last < 3 * median_first + 50e-6, (median_first, median_last)
    assert len(body.code_blocks()) == 30


def test_streamed_and_one_shot_renders_match(qtbot):
    text = "# Title\n\nSome *text* and a list:\n- a\n- b\n\n```js\nlet x = 1;\n```\nAfter **code**.\n"
    streamed, whole = MarkdownBody(), MarkdownBody(text)
    qtbot.addWidget(streamed)
    qtbot.addWidget(whole)
    streamed.begin_stream()
    for ch in text:
        streamed.append(ch)
    streamed.finish()

    def shape(body):
        parts = []
        for seg in body.segments():
            if isinstance(seg, ProseSegment):
                parts.append(("prose", seg.document().toMarkdown()))
            else:
                parts.append(("code", seg.language, seg.code))
        return parts

    assert shape(streamed) == shape(whole)
    prose = shape(whole)[0][1]
    assert "# Title" in prose and "*text*" in prose and "- a" in prose


def test_code_blocks_are_highlighted_and_copied(qtbot):
    body = MarkdownBody("Look:\n\n```python\ndef f():\n    return 1\n```\n")
    qtbot.addWidget(body)
    (block,) = body.code_blocks()
    html = block.body.toHtml()
    assert "color:" in html  # pygments spans survived into the document
    assert block.body.toPlainText() == "def f():\n    return 1"
    assert block.copy_button.accessibleName() == "Copy python block"
    with qtbot.waitSignal(block.copied):
        block.copy_button.click()
    assert QGuiApplication.clipboard().text() == "def f():\n    return 1"


def test_turn_stream_coalesces_deltas_and_finishes_once(qtbot, aloop):
    async def events():
        yield Started(1, 1, 2, "m", "scripted")
        for i in range(500):
            yield Delta(f"{i} ")
        yield Usage(3, 500, 0.01, 900.0)
        yield Finished(FinishReason.STOP, 2)

    stream = TurnStream(events(), 1)
    chunks, finished = [], []
    stream.text.connect(chunks.append)
    stream.finished.connect(finished.append)
    with qtbot.waitSignal(stream.finished, timeout=5000):
        stream.start()
    assert "".join(chunks) == "".join(f"{i} " for i in range(500))
    assert len(chunks) < 500  # coalesced, not one signal per delta
    assert finished == [Finished(FinishReason.STOP, 2)]
    assert stream.usage_event.tokens_per_second == 900.0
    assert FLUSH_MS <= 40


def test_turn_stream_turns_an_engine_refusal_into_a_failure(qtbot, aloop):
    from wren.engine.errors import InvalidRequest

    async def events():
        raise InvalidRequest("the message is empty")
        yield  # pragma: no cover

    stream = TurnStream(events(), 1)
    with qtbot.waitSignal(stream.finished, timeout=5000) as blocker:
        stream.start()
    assert blocker.args[0].reason is FinishReason.ERROR
    assert stream.failure.kind.value == "invalid_request" and "empty" in stream.failure.error


def test_a_long_chat_opens_newest_first_and_fills_in_older_messages(qtbot):
    from datetime import datetime

    from wren.desktop.chat.view import EAGER_MESSAGES, ChatView
    from wren.engine.records import MessageInfo, MessageStatus, Role

    answer = "A paragraph with **bold**.\n\n```python\nprint(1)\n```\n"
    messages = [
        MessageInfo(i + 1, 1, i or None, Role.USER if i % 2 == 0 else Role.ASSISTANT,
                    f"question {i}" if i % 2 == 0 else answer, MessageStatus.COMPLETE, datetime.now())
        for i in range(80)
    ]
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.show()
    view.show_messages(messages)
    assert len(view.message_widgets()) == EAGER_MESSAGES  # the rest builds while the loop runs
    assert view.message_widgets()[-1].message_id == 80
    qtbot.waitUntil(lambda: view.complete)
    assert [w.message_id for w in view.message_widgets()] == list(range(1, 81))
    bar = view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.value() == bar.maximum())  # still at the newest message
