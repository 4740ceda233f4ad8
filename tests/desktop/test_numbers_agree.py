"""The window's numbers agree with the answer's record (issue 34): the composer's count while an
answer streams is its prompt, not the empty chat's 0; with a tool offered and a file attached,
the status bar, the inspector and the record say the same prompt size, and the inspector's
exact prompt holds the tool definitions and the file."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from wren.engine.context.report import context_used
from wren.engine.records import Role

REPLY = " ".join(f"word{i}" for i in range(60))


def _last_answer(window, arun):
    messages = arun(window.engine.conversations.messages(window.conversations.current_id))
    return next(m for m in reversed(messages) if m.role is Role.ASSISTANT)


def test_the_composer_counts_the_prompt_while_the_first_answer_streams(open_window, qtbot, arun):
    window = open_window(REPLY, delay=0.02)
    label = window.composer.token_label
    window.composer.edit.setPlainText("What is a good name for a cat?")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: bool(window.conversations.streams) and len(window.chat.last_answer().text()) > 5)
        answer = _last_answer(window, arun)
        assert answer.prompt_tokens
        qtbot.waitUntil(lambda: label.text().startswith(f"{answer.prompt_tokens:,} / "), timeout=3000)
        assert not label.text().startswith("0 /")
    done = _last_answer(window, arun)
    assert label.text().startswith(f"{context_used(done.prompt_tokens, done.completion_tokens):,} / ")


def test_status_bar_inspector_and_record_agree_with_a_tool_and_a_file(open_window, send, qtbot, arun, tmp_path):
    window = open_window("Lentil soup would suit you.")
    send(window, "Hello")
    qtbot.waitUntil(lambda: window.conversations.tools.loaded)
    window.composer.tools_button.set_chosen("current_datetime", True)
    note = tmp_path / "diet.md"
    note.write_text("# Diet\n\nNo peanuts; vegetarian since 2019.\n", encoding="utf-8")
    window.composer.attachment_bar.add(str(note))
    window.composer.edit.setPlainText("What should I cook tonight?")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    answer = _last_answer(window, arun)
    used = context_used(answer.prompt_tokens, answer.completion_tokens)
    assert window.status.context_label.text().startswith(f"context {used:,} / ")
    inspector = arun(window.context.inspect(answer.id))
    assert f"The prompt took {answer.prompt_tokens:,} of" in inspector.summary_label.text()
    prompt = inspector.prompt_view.toPlainText()
    assert "current_datetime" in prompt  # the tool's definition, as the model read it
    assert any(row[0] == "Tools" for row in inspector.rows())

    assert "No peanuts" in prompt  # and the attached file


def test_while_a_model_loads_loading_is_said_once_and_no_old_numbers_show(open_window, send, qtbot, arun, aloop):
    import asyncio

    window = open_window(REPLY, delay=0.002)
    send(window, "first")
    assert "tokens/s" in window.status.speed_label.text() and window.status.context_label.text()
    gate = asyncio.Event()
    real_load = window.engine.models.load

    async def held_load(*args, **kwargs):  # the real load, once the test has looked
        await gate.wait()
        return await real_load(*args, **kwargs)

    window.engine.models.load = held_load
    window.models.load_in_background("tiny")
    qtbot.waitUntil(lambda: window.models.is_loading)
    texts = [w.text() for w in window.findChildren(QLabel) if w.isVisible()]
    texts += [window.composer.edit.placeholderText()]
    assert sum("Loading" in t for t in texts) == 1, texts
    assert window.status.speed_label.text() == "" and window.status.context_label.text() == ""
    assert window.status.progress.isVisible()
    with qtbot.waitSignal(window.models.loaded, timeout=20000):
        gate.set()
    assert window.composer.edit.placeholderText() == "Message Wren"


def test_an_answer_cut_by_the_length_limit_is_labelled(open_window, arun, qtbot):
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.records import SendOptions

    window = open_window(REPLY)
    engine = window.engine

    async def ask():
        conv = await engine.conversations.create()
        async for _ in engine.chat.send(conv.id, "count", SendOptions(sampling=SamplingParams(max_tokens=6))):
            pass
        return conv.id

    conv = arun(ask())
    with qtbot.waitSignal(window.conversations.opened):
        window.tasks.run(window.conversations.open(conv), what="opening")
    answer = window.chat.last_answer()
    assert not answer.status_label.isHidden()
    assert "length limit" in answer.status_label.text()
    assert not answer.continue_button.isHidden()


def test_an_edited_question_is_counted_in_place_of_itself_and_what_followed(open_window, send, qtbot, arun):
    """Editing added the new text on top of the whole chat ("504 / 8,192")."""
    window = open_window(REPLY)
    label = window.composer.token_label
    send(window, "What is a good name for a cat?")
    first = _last_answer(window, arun)
    send(window, "And for a dog?")
    second = _last_answer(window, arun)
    whole = context_used(second.prompt_tokens, second.completion_tokens)
    qtbot.waitUntil(lambda: label.text() == f"{whole:,} / {window.counter._limit:,} tokens", timeout=3000)
    questions = [w for w in window.chat.message_widgets() if w.role is Role.USER]

    window.chat.edit_requested.emit(questions[1].message_id)  # the second: counted on top of the first exchange
    qtbot.waitUntil(lambda: "in this message" in label.text(), timeout=3000)
    draft = window.counter.last
    before = context_used(first.prompt_tokens, first.completion_tokens)
    assert label.text() == f"{draft:,} in this message · {before + draft:,} / {window.counter._limit:,} tokens"

    window.composer.cancel_edit()
    window.chat.edit_requested.emit(questions[0].message_id)  # the first: nothing before it
    qtbot.waitUntil(lambda: label.text().startswith(f"{window.counter.last:,} in this message · "
                                                    f"{window.counter.last:,} / "), timeout=3000)
    window.composer.cancel_edit()  # back to the whole chat
    qtbot.waitUntil(lambda: label.text() == f"{whole:,} / {window.counter._limit:,} tokens", timeout=3000)
