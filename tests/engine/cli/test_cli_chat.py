"""`wren chat`'s commands and multi-line input, in this process over the scripted backend."""

from __future__ import annotations

import asyncio
import io

import pytest

from wren.engine.terminal.chat import COMMANDS, Chat, help_text, read_message
from wren.engine.terminal.output import Output


def _lines(*lines: str):
    queue = list(lines)

    def read(prompt: str) -> str:
        if not queue:
            raise EOFError
        return queue.pop(0)

    return read


@pytest.mark.parametrize(("typed", "message"), [
    (["plain"], "plain"),
    (['"""one line"""'], "one line"),
    (['"""', "first", "", "  indented", '"""'], "first\n\n  indented"),
    (['"""first', "second", 'last"""'], "first\nsecond\nlast"),
    (['"""', "/not a command", '"""'], "/not a command"),
])
def test_read_message_joins_lines_between_triple_quotes(typed, message):
    assert read_message(_lines(*typed)) == message


def test_input_that_ends_inside_triple_quotes_is_sent_not_dropped():
    """A pipe whose text never closes its quotes: what it held is the message."""
    assert read_message(_lines('"""', "unterminated", "second line")) == "unterminated\nsecond line"
    with pytest.raises(EOFError):  # nothing was typed after the quotes: the end of input, as before
        read_message(_lines('"""', "  "))


def test_prompts_say_when_more_lines_are_wanted():
    prompts = []
    queue = ['"""', "a", '"""']

    def read(prompt):
        prompts.append(prompt)
        return queue.pop(0)

    read_message(read, prompt=">>> ", more="... ")
    assert prompts == [">>> ", "... ", "... "]


def _chat(engine, err):
    async def make():
        await engine.models.load()
        return Chat(engine, await engine.settings.default_sampling(), out=Output(io.StringIO()), err=err)

    return make


def _prompts(engine) -> list[str]:
    return [p for model in engine.scripted.loaded for p in model.prompts]


def test_commands_are_never_sent_and_unknown_ones_are_errors(make_engine):
    engine = make_engine(lambda prompt: "answered")
    err = io.StringIO()

    async def scenario():
        chat = await _chat(engine, err)()
        for line in ("/nope", "/help", "/set", "/system", "/HELP", "/model", "/models", "/new"):
            assert await chat.handle(line) is True
        assert _prompts(engine) == []
        assert await engine.conversations.list() == []  # nothing sent, no chat made
        assert await chat.handle("//etc/hosts is a file") is True
        assert await chat.handle("/bye") is False
        assert await chat.handle("/exit") is False
        await engine.close()

    asyncio.run(scenario())
    text = err.getvalue()
    assert "unknown command /nope" in text and "/help lists the commands" in text
    for command in COMMANDS:
        assert command.name in text  # /help listed it
    (prompt,) = _prompts(engine)
    assert "/etc/hosts is a file" in prompt and "//etc" not in prompt
    assert "/nope" not in prompt


def test_set_changes_the_sampling_and_refuses_bad_values(make_engine):
    engine = make_engine()
    err = io.StringIO()

    async def scenario():
        chat = await _chat(engine, err)()
        await chat.handle("/set temperature 0")
        await chat.handle("/set top-k 5")
        await chat.handle("/set seed 42")
        assert (chat.params.temperature, chat.params.top_k, chat.params.seed) == (0.0, 5, 42)
        await chat.handle("/set temperature hot")
        await chat.handle("/set temperature 9")
        await chat.handle("/set colour blue")
        await chat.handle("/set seed off")
        assert chat.params.temperature == 0.0 and chat.params.seed is None
        await engine.close()

    asyncio.run(scenario())
    text = err.getvalue()
    assert "'hot' is not a number" in text
    assert "temperature must be between 0 and 5" in text
    assert "/set does not know 'colour'" in text


def test_system_prompt_and_new_chat_reach_the_model(make_engine):
    engine = make_engine(lambda prompt: "ok")
    err = io.StringIO()

    async def scenario():
        chat = await _chat(engine, err)()
        await chat.handle("/system You are a pirate.")
        await chat.handle("first question")
        first = chat.conv.id
        await chat.handle("/new")
        assert chat.conv is None  # made by the next message: no empty chat is left
        await chat.handle("/set system You are a poet.")
        await chat.handle("second question")
        assert chat.conv.id != first
        assert [c.title for c in await engine.conversations.list()] == ["second question", "first question"]
        await engine.close()

    asyncio.run(scenario())
    first, second = _prompts(engine)
    assert "You are a pirate." in first and "first question" in first
    assert "You are a poet." in second and "first question" not in second


def test_help_text_names_every_command_and_alias():
    text = help_text()
    for command in COMMANDS:
        assert command.name in text and all(alias in text for alias in command.aliases)
    assert '"""' in text


def test_a_refused_first_message_leaves_no_chat(make_engine):
    engine = make_engine()
    err = io.StringIO()

    async def scenario():
        chat = await _chat(engine, err)()
        await chat.handle("word " * 5000)
        assert chat.conv is None
        assert await engine.conversations.list() == []
        await chat.handle("a short one")
        assert [c.title for c in await engine.conversations.list()] == ["a short one"]
        await engine.close()

    asyncio.run(scenario())
    assert "tokens" in err.getvalue()  # the reason it was refused


def test_an_answer_cut_at_its_length_limit_is_said_in_the_chat(make_engine):
    engine = make_engine("one two three four five six seven eight nine ten eleven twelve")
    err = io.StringIO()

    async def scenario():
        chat = await _chat(engine, err)()
        await chat.handle("/set max-tokens 3")
        await chat.handle("count")
        answer = (await engine.conversations.messages(chat.conv.id))[-1]
        await engine.close()
        return answer.id

    answer_id = asyncio.run(scenario())
    assert f"wren: note: the answer reached its length limit (max_tokens); `wren continue {answer_id}` goes on" \
        in err.getvalue()
