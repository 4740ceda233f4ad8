"""Tools in the window: a call's card inline in the answer (name, arguments, result, a
spinner and Cancel while it runs), the approval prompt (allow once, always, deny), replay
from the stored message, Settings → Tools, and the composer's tool menu and attachments."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from tests.engine.tools.conftest import FakeSource, by_round, call
from wren.desktop.chat.segments import ProseSegment
from wren.desktop.chat.toolcard import ToolCard
from wren.engine.records import SendOptions

LIVE_MS = 15000


async def _echo(arguments, cancel):
    return f"echoed {arguments.get('x', '')}", False


async def _block(arguments, cancel):
    await cancel.wait()  # runs until the user cancels it
    return "never", False


def _window(open_window, reply, *, approval=("echo",)):
    window = open_window(reply)
    source = FakeSource("test", echo=_echo, block=_block)
    source.approval = set(approval)
    window.engine.tools.registry.add_source(source)
    return window, source


def _choose(window, qtbot, *names):
    """Tick tools in the composer's menu, as a user would."""
    button = window.composer.tools_button
    button.menu_.aboutToShow.emit()  # opening the menu lists the tools afresh
    qtbot.waitUntil(lambda: button.loaded and set(names) <= set(button.actions_by_name()), timeout=5000)
    for name in names:
        button.actions_by_name()[name].trigger()


def _press_send(window, qtbot, text):
    window.composer.edit.setPlainText(text)
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)


def _card(window, qtbot) -> ToolCard:
    def found():
        answer = window.chat.last_answer()
        return answer is not None and bool(answer.tool_cards)
    qtbot.waitUntil(found, timeout=LIVE_MS)
    return next(iter(window.chat.last_answer().tool_cards.values()))


def _reload_tools(window, qtbot):
    button = window.composer.tools_button
    button.loaded = False
    window.conversations.load_tools()
    qtbot.waitUntil(lambda: button.loaded, timeout=5000)


# -- approval ------------------------------------------------------------------------------


def test_allow_once_runs_the_call_and_asks_again_next_time(open_window, qtbot, arun):
    window, source = _window(open_window, by_round("Let me check. " + call("echo", x="hi"), "All done."))
    _choose(window, qtbot, "echo")
    _press_send(window, qtbot, "echo hi")
    card = _card(window, qtbot)
    qtbot.waitUntil(lambda: card.state == "approval", timeout=LIVE_MS)
    # the exact arguments are shown, opened, next to the three choices
    assert card.args_section.expanded and json.loads(card.args_section.text.toPlainText()) == {"x": "hi"}
    assert card.approval.isVisible() and not card.cancel_button.isVisible()
    assert [b.text() for b in (card.allow_once_button, card.allow_always_button, card.deny_button)] == [
        "Allow once", "Always allow this tool", "Deny"]
    assert source.calls == []  # nothing runs before the user says so
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        qtbot.mouseClick(card.allow_once_button, Qt.MouseButton.LeftButton)
    assert source.calls == [("echo", {"x": "hi"})]
    card = _card(window, qtbot)  # the stored answer is shown: its card replays the result
    assert card.state == "done" and card.result_section.text.toPlainText() == "echoed hi"
    assert window.chat.last_answer().text() == "Let me check. All done."
    assert arun(window.engine.tools.always_allowed()) == []


def test_always_allow_is_kept_and_the_next_call_does_not_ask(open_window, qtbot, arun):
    window, source = _window(open_window, by_round(call("echo", x="one"), "Fine."))
    _choose(window, qtbot, "echo")
    _press_send(window, qtbot, "first")
    card = _card(window, qtbot)
    qtbot.waitUntil(lambda: card.state == "approval", timeout=LIVE_MS)
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        card.allow_always_button.click()
    assert arun(window.engine.tools.always_allowed()) == ["echo"]
    # the second call runs without a prompt: the answer finishes with nobody clicking
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        _press_send(window, qtbot, "second")
    assert [c[1] for c in source.calls] == [{"x": "one"}, {"x": "one"}]
    assert _card(window, qtbot).state == "done"


def test_deny_shows_the_user_declined_and_the_answer_goes_on(open_window, qtbot):
    window, source = _window(open_window, by_round("Trying. " + call("echo", x="secret"), "Understood."))
    _choose(window, qtbot, "echo")
    _press_send(window, qtbot, "do it")
    card = _card(window, qtbot)
    qtbot.waitUntil(lambda: card.state == "approval", timeout=LIVE_MS)
    card.deny_button.setFocus()
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        qtbot.keyClick(card.deny_button, Qt.Key.Key_Space)  # the keyboard works as well as the mouse
    assert source.calls == []
    card = _card(window, qtbot)
    assert card.result_section.text.toPlainText() == "the user declined"
    assert card.state_label.text() == "declined" and card.state == "declined"  # a choice, not an error
    assert card.result_section.title == "Result"
    # the Deny button is gone; keyboard focus stayed in the card rather than jumping away
    assert QApplication.focusWidget() is card.args_section.toggle
    assert window.chat.last_answer().text() == "Trying. Understood."


# -- the card ------------------------------------------------------------------------------


def test_the_card_shows_name_arguments_and_result_and_expands(open_window, qtbot):
    window, _source = _window(open_window, by_round("Working. " + call("calculator", expression="6*7"), "It is 42."),
                              approval=())
    _choose(window, qtbot, "calculator")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        _press_send(window, qtbot, "6*7?")
    card = _card(window, qtbot)
    assert "calculator" in card.title.text() and card.accessibleName() == "Tool call: calculator"
    assert card.state == "done" and not card.cancel_button.isVisible()
    # collapsed: one summary line each; a click (or Space) opens the pretty JSON / the result
    assert not card.args_section.text.isVisible() and not card.result_section.text.isVisible()
    assert "6*7" in card.args_section.toggle.text()
    qtbot.mouseClick(card.args_section.toggle, Qt.MouseButton.LeftButton)
    assert card.args_section.text.isVisible()
    assert card.args_section.text.toPlainText() == '{\n  "expression": "6*7"\n}'
    card.result_section.toggle.setFocus()
    qtbot.keyClick(card.result_section.toggle, Qt.Key.Key_Space)
    assert card.result_section.text.isVisible() and card.result_section.text.toPlainText() == "42"
    assert card.result_section.toggle.accessibleName() == "Hide result"
    # the card sits between the text before the call and the text after it
    body = window.chat.last_answer().body
    kinds = [type(w).__name__ for w in body.segments()]
    assert kinds == ["ProseSegment", "ToolCard", "ProseSegment"]
    assert [w.toPlainText().strip() for w in body.segments() if isinstance(w, ProseSegment)] == ["Working.", "It is 42."]
    # its buttons are Tab stops between the chat and the composer
    stops = window.tab_stops()
    assert stops.index(card.args_section.toggle) < stops.index(window.composer.edit)


def test_an_error_result_is_styled_as_an_error(open_window, qtbot):
    window, _source = _window(open_window, by_round(call("calculator", expression="1/0"), "Oops."), approval=())
    _choose(window, qtbot, "calculator")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        _press_send(window, qtbot, "1/0")
    card = _card(window, qtbot)
    assert card.state == "error" and card.property("state") == "error"
    assert card.result_section.title == "Error" and card.state_label.text().startswith("error")
    assert card.result_section.text.toPlainText()


def test_cancel_stops_a_running_tool_and_the_answer_goes_on(open_window, qtbot, arun):
    window, source = _window(open_window, by_round("Waiting. " + call("block"), "Never mind."), approval=())
    _choose(window, qtbot, "block")
    _press_send(window, qtbot, "block")
    card = _card(window, qtbot)
    qtbot.waitUntil(lambda: source.calls == [("block", {})], timeout=LIVE_MS)
    assert card.state == "running" and card.cancel_button.isVisible() and card.cancel_button.isEnabled()
    frame = card.spinner.text()
    qtbot.waitUntil(lambda: card.spinner.text() != frame, timeout=2000)  # it moves while the tool runs
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS) as finished:
        qtbot.mouseClick(card.cancel_button, Qt.MouseButton.LeftButton)
    assert finished.args[0].reason.value == "stop"
    card = _card(window, qtbot)
    assert card.state == "error" and card.result_section.text.toPlainText() == "cancelled by the user"
    assert window.chat.last_answer().text() == "Waiting. Never mind."


# -- replay --------------------------------------------------------------------------------


def test_a_stored_answer_replays_its_cards_in_place(open_window, qtbot, arun):
    window, _source = _window(open_window, by_round("A " + call("calculator", expression="2+3"),
                                                    "C " + call("echo", x="z"), "D"), approval=())
    _choose(window, qtbot, "calculator", "echo")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        _press_send(window, qtbot, "go")
    conversation_id = window.conversations.current_id
    window.conversations.new_chat()
    assert window.chat.last_answer() is None
    arun(window.conversations.open(conversation_id))
    answer = window.chat.last_answer()
    assert answer.info.meta["tools"]  # replayed from meta["tools"], not from a live stream
    cards = list(answer.tool_cards.values())
    assert [(c.name, c.arguments, c.state) for c in cards] == [
        ("calculator", {"expression": "2+3"}, "done"), ("echo", {"x": "z"}, "done")]
    assert cards[0].result_section.text.toPlainText() == "5"
    assert cards[1].result_section.text.toPlainText() == "echoed z"
    order = [w for w in answer.body.segments()]
    assert [type(w).__name__ for w in order] == ["ProseSegment", "ToolCard", "ProseSegment", "ToolCard",
                                                   "ProseSegment"]
    assert not any(c._timer.isActive() for c in cards)  # nothing spins in a finished answer


def test_returning_to_a_chat_mid_approval_still_offers_the_choice(open_window, qtbot, arun):
    window, source = _window(open_window, by_round("Hmm. " + call("echo", x="back"), "Ok."))
    _choose(window, qtbot, "echo")
    _press_send(window, qtbot, "echo back")
    card = _card(window, qtbot)
    qtbot.waitUntil(lambda: card.state == "approval", timeout=LIVE_MS)
    conversation_id = window.conversations.current_id
    window.conversations.new_chat()
    arun(window.conversations.open(conversation_id))
    card = _card(window, qtbot)
    assert card.state == "approval" and card.name == "echo"
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        card.allow_once_button.click()
    assert source.calls == [("echo", {"x": "back"})]


# -- the composer --------------------------------------------------------------------------


def _spy_send(window):
    sent: list[SendOptions | None] = []
    original = window.engine.chat.send

    def spy(conversation_id, text, options=None):
        sent.append(options)
        return original(conversation_id, text, options)

    window.engine.chat.send = spy
    return sent


def test_the_tools_menu_sets_what_send_passes_and_is_kept_per_chat(open_window, qtbot, arun):
    window, _source = _window(open_window, "Plain answer.")
    button = window.composer.tools_button
    sent = _spy_send(window)
    qtbot.waitUntil(lambda: button.loaded, timeout=5000)
    assert button.text() == "Tools · off" and button.chosen() == []
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        _press_send(window, qtbot, "no tools")
    assert sent[-1].tools == ()
    _choose(window, qtbot, "calculator", "echo")
    assert button.text() == "Tools · 2" and "calculator, echo" in button.accessibleName()
    conversation_id = window.conversations.current_id
    qtbot.waitUntil(lambda: arun(window.engine.tools.for_conversation(conversation_id)) == ["calculator", "echo"],
                    timeout=5000)
    button.actions_by_name()["echo"].trigger()  # untick
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        _press_send(window, qtbot, "now with one")
    assert sent[-1].tools == ("calculator",)
    assert arun(window.engine.tools.for_conversation(conversation_id)) == ["calculator"]
    # a new chat starts from the default (none); coming back shows this chat's own choice
    window.conversations.new_chat()
    qtbot.waitUntil(lambda: button.chosen() == [], timeout=5000)
    arun(window.conversations.open(conversation_id))
    qtbot.waitUntil(lambda: button.chosen() == ["calculator"], timeout=5000)
    assert button.actions_by_name()["calculator"].isChecked()


def test_a_switched_off_tool_is_not_offered_in_the_menu(open_window, qtbot, arun):
    window, _source = _window(open_window, "Plain.")
    arun(window.engine.tools.set_enabled("calculator", False))
    _reload_tools(window, qtbot)
    assert "calculator" not in window.composer.tools_button.actions_by_name()
    assert "echo" in window.composer.tools_button.actions_by_name()


def test_attached_files_show_as_chips_and_go_with_the_message(open_window, qtbot, tmp_path):
    window, _source = _window(open_window, "Read it.")
    sent = _spy_send(window)
    notes = tmp_path / "notes.txt"
    notes.write_text("remember the milk\n")
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    bar = window.composer.attachment_bar
    bar.add(str(notes))
    chip = bar.add(str(other))
    assert bar.add(str(notes)) is None  # the same file once
    assert [c.label.text() for c in bar.chips()] == ["notes.txt", "other.csv"]
    assert chip.remove_button.accessibleName() == "Remove the attached file other.csv"
    qtbot.mouseClick(chip.remove_button, Qt.MouseButton.LeftButton)
    assert bar.files() == [str(notes.resolve())]
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        _press_send(window, qtbot, "what does my note say?")
    assert sent[-1].attachments == (str(notes.resolve()),)
    assert bar.files() == []  # they left with the message


# -- Settings → Tools ----------------------------------------------------------------------


@pytest.fixture
def tools_page(make_engine, arun, qtbot):
    from wren.desktop.bridge import Tasks
    from wren.desktop.settings.tools import ToolsPage

    engine = make_engine()
    tasks = Tasks()
    page = ToolsPage(engine, tasks)
    qtbot.addWidget(page)
    arun(page.load())
    yield page
    arun(tasks.cancel_all())
    arun(engine.close())


def _item(widget, name):
    return next(widget.item(i) for i in range(widget.count())
                if widget.item(i).data(Qt.ItemDataRole.UserRole) == name)


def test_settings_switches_a_tool_off_and_on_when_saved(tools_page, qtbot, arun):
    engine = tools_page.engine
    item = _item(tools_page.tool_list, "calculator")
    assert item.checkState() == Qt.CheckState.Checked
    item.setCheckState(Qt.CheckState.Unchecked)

    def enabled():
        return {t.name: t.enabled for t in arun(engine.tools.list())}["calculator"]
    assert enabled() is True and "Save" in tools_page.status.text()  # kept on Save, like every setting
    arun(tools_page.load())  # the page shown again keeps the switch not saved yet
    assert _item(tools_page.tool_list, "calculator").checkState() == Qt.CheckState.Unchecked
    arun(tools_page.save())
    assert enabled() is False
    _item(tools_page.tool_list, "calculator").setCheckState(Qt.CheckState.Checked)
    arun(tools_page.save())
    assert enabled() is True


def test_settings_lists_always_allowed_tools_and_revokes(tools_page, qtbot, arun):
    engine = tools_page.engine
    assert not tools_page.revoke_button.isEnabled()
    arun(engine.tools.allow_always("echo"))
    arun(engine.tools.allow_always("calculator"))
    arun(tools_page.load())
    assert [tools_page.always_list.item(i).text() for i in range(2)] == ["Calculator", "Echo"]
    tools_page.always_list.setCurrentRow(1)
    arun(tools_page.revoke())
    assert arun(engine.tools.always_allowed()) == ["calculator"]
    assert tools_page.always_list.item(0).text() == "Calculator" and "ask again" in tools_page.status.text()


def test_settings_adds_edits_and_removes_an_mcp_server_without_starting_it(tools_page, qtbot, arun):
    engine = tools_page.engine
    page = tools_page
    page.name_edit.setText("notes")
    page.command_edit.setText("python3")
    page.args_edit.setText("-m my_server --root '/tmp/my notes'")
    page.env_edit.setPlainText("TOKEN=abc\n# a comment\nLEVEL=2")
    assert page.save_button.text() == "Add server"
    info = arun(page.save_server())
    assert (info.command, info.args, info.env) == ("python3", ("-m", "my_server", "--root", "/tmp/my notes"),
                                                   {"TOKEN": "abc", "LEVEL": "2"})
    assert info.state == "stopped"  # added, not started
    assert page.server_list.count() == 1 and page.save_button.text() == "Save changes"
    assert page.remove_button.isEnabled() and page.test_button.isEnabled()
    # edit: the chosen server fills the form; saving replaces it
    page.args_edit.setText("-m other")
    arun(page.save_server())
    servers = arun(engine.tools.mcp_servers())
    assert [(s.name, s.args, s.state) for s in servers] == [("notes", ("-m", "other"), "stopped")]
    # a URL server, and a bad environment line named on the page
    page.new_server()
    page.name_edit.setText("web")
    page.kind_picker.setCurrentIndex(1)
    assert page.url_edit.isVisibleTo(page) and not page.command_edit.isVisibleTo(page)
    page.url_edit.setText("http://127.0.0.1:9/mcp")
    arun(page.save_server())
    page.new_server()
    page.name_edit.setText("broken")
    page.command_edit.setText("x")
    page.env_edit.setPlainText("NOEQUALS")
    assert arun(page.save_server()) is None and "line 1" in page.status.text()
    assert sorted(s.name for s in arun(engine.tools.mcp_servers())) == ["notes", "web"]
    # remove the chosen one
    page.server_list.setCurrentItem(_item(page.server_list, "notes"))
    assert page.name_edit.text() == "notes" and page.args_edit.text() == "-m other"
    arun(page.remove_server())
    assert [s.name for s in arun(engine.tools.mcp_servers())] == ["web"]


def test_settings_imports_mcp_servers_json_and_refuses_bad_json(tools_page, arun, tmp_path):
    page = tools_page
    text = json.dumps({"mcpServers": {"files": {"command": "npx", "args": ["-y", "fs"]},
                                      "remote": {"url": "http://127.0.0.1:9/mcp"}}})
    page.import_edit.setPlainText(text)
    assert arun(page.import_json(page.import_edit.toPlainText())) == ["files", "remote"]
    assert "Imported 2 servers" in page.status.text() and page.server_list.count() == 2
    assert arun(page.import_json("{not json")) == [] and page.status.text().startswith("Nothing imported")
    two_bad = json.dumps({"mcpServers": {"a": {"args": []}, "b": {"url": 5}}})
    assert arun(page.import_json(two_bad)) == []
    said = page.status.text()
    assert said.startswith("Nothing was imported; ") and said.lower().count("nothing") == 1, said  # said once
    path = tmp_path / "claude.json"
    path.write_text(json.dumps({"mcpServers": {"more": {"command": "uvx", "args": ["thing"]}}}))
    assert arun(page.import_file(path)) == ["more"]
    assert page.server_list.count() == 3


def test_settings_test_connection_failure_is_said_and_the_log_shown(tools_page, arun, tmp_path):
    page = tools_page
    page.name_edit.setText("missing")
    page.command_edit.setText(str(tmp_path / "no-such-program"))
    arun(page.save_server())
    arun(page.test_server(), timeout=30)
    assert "missing" in page.status.text() and "could not start" in page.status.text()
    assert page.output.isVisibleTo(page)
    arun(page.show_log())
    assert page.status.text() == "The log of missing, newest last."


def test_settings_has_a_tools_page(open_window, qtbot):
    from wren.desktop.settings.dialog import SettingsDialog

    window = open_window()
    dialog = SettingsDialog(window.engine, window.tasks)
    qtbot.addWidget(dialog)
    titles = [dialog.pages.title(i) for i in range(dialog.pages.count())]
    assert "Tools" in titles
    assert dialog.pages.widget(titles.index("Tools")) is dialog.tools_page


@pytest.mark.parametrize("bad", ["NOEQUALS", "TWO WORDS=1", "=value"])
def test_parse_env_names_the_bad_line(bad):
    from wren.desktop.settings.tools import parse_env

    with pytest.raises(ValueError, match="line 2"):
        parse_env("OK=1\n" + bad)
    assert parse_env("A=1\n\n# c\nB = x=y") == {"A": "1", "B": " x=y"}


def test_a_huge_result_is_cut_in_the_card(qtbot):
    card = ToolCard("c1", "big", {})
    qtbot.addWidget(card)
    card.set_result("x" * 10_000_000, False, 0.5)
    shown = card.result_section.text.toPlainText()
    assert len(shown) < 300_000 and "more characters not shown" in shown
    assert card.state_label.text() == "done · 0.5 s"


def test_a_call_without_result_in_an_ended_answer_does_not_spin(open_window, qtbot):
    from dataclasses import replace

    from wren.desktop.chat.message import MessageWidget
    from wren.engine.records import MessageStatus, Role

    window, _source = _window(open_window, by_round("Before. " + call("calculator", expression="1+1"), "After."),
                              approval=())
    _choose(window, qtbot, "calculator")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        _press_send(window, qtbot, "go")
    stored = window.chat.last_answer().info
    calls_only = [item for item in stored.meta["tools"] if item["type"] == "tool_call"]
    # as if Wren had closed while the tool ran: the call is stored, its result never came
    info = replace(stored, status=MessageStatus.INTERRUPTED, meta={**stored.meta, "tools": calls_only})
    widget = MessageWidget(Role.ASSISTANT, info.content, info)
    qtbot.addWidget(widget)
    (card,) = widget.tool_cards.values()
    assert card.state == "error" and card.state_label.text() == "no result"
    assert not card._timer.isActive() and not card.cancel_button.isVisibleTo(widget)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_mcp_server_added_in_settings_is_tested_offered_and_asks_before_its_call(open_window, qtbot, arun):
    """End to end with the FastMCP test server over stdio: Settings adds and tests it, the
    composer's menu offers its tool, and its call asks first (MCP tools always do)."""
    import sys

    from tests.engine.mcp.conftest import SERVER
    from wren.desktop.settings.tools import ToolsPage

    window = open_window(by_round("Asking the server. " + call("t__echo", text="hello mcp"), "It said so."))
    page = ToolsPage(window.engine, window.tasks)
    qtbot.addWidget(page)
    arun(page.load())
    page.name_edit.setText("t")
    page.command_edit.setText(sys.executable)
    page.args_edit.setText(str(SERVER))
    arun(page.save_server())
    arun(page.test_server(), timeout=90)
    assert page.status.text().startswith("t works:"), page.status.text()
    assert "t__echo" in page.output.toPlainText()
    _choose(window, qtbot, "t__echo")
    _press_send(window, qtbot, "echo through mcp")
    card = _card(window, qtbot)
    qtbot.waitUntil(lambda: card.state == "approval", timeout=LIVE_MS)
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=60000):
        card.allow_once_button.click()
    card = _card(window, qtbot)
    assert card.state == "done" and card.result_section.text.toPlainText() == "hello mcp"
    arun(page.show_log())
    assert page.output.toPlainText()
