"""Tool-call parsing for the three families, fed whole and split across deltas."""

from __future__ import annotations

import json

import pytest

from wren.engine.tools.parse import CallParser, ParsedCall, family_for, json_end


def run(family: str, chunks: list[str]) -> tuple[str, list[ParsedCall], CallParser]:
    parser = CallParser(family)
    pieces = []
    for chunk in chunks:
        pieces += parser.feed(chunk)
    pieces += parser.finish()
    text = "".join(p for p in pieces if isinstance(p, str))
    calls = [p for p in pieces if isinstance(p, ParsedCall)]
    return text, calls, parser


def splits(text: str) -> list[list[str]]:
    """The text whole, one character at a time, and in uneven pieces."""
    return [[text], list(text), [text[i:i + 3] for i in range(0, len(text), 3)],
            [text[i:i + 7] for i in range(0, len(text), 7)]]


HERMES = 'Let me compute that.<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>'


@pytest.mark.parametrize("chunks", splits(HERMES))
def test_hermes_call_is_parsed_and_its_text_never_shown(chunks):
    parser = CallParser("hermes")
    shown = []
    calls = []
    for chunk in chunks:
        for piece in parser.feed(chunk):
            (calls if isinstance(piece, ParsedCall) else shown).append(piece)
            # no shown text may hold any part of the call
            assert "<tool" not in "".join(p for p in shown if isinstance(p, str))
    for piece in parser.finish():
        (calls if isinstance(piece, ParsedCall) else shown).append(piece)
    assert "".join(shown) == "Let me compute that."
    assert calls == [ParsedCall("calculator", {"expression": "2+2"}, None, calls[0].raw)]


def test_hermes_two_calls_then_other_text_ends_the_round():
    text = ('<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b", "arguments": '
            '"{\\"x\\": 1}"}</tool_call>\n<tool_response>made up</tool_response>')
    shown, calls, parser = run("hermes", list(text))
    assert [c.name for c in calls] == ["a", "b"] and calls[1].arguments == {"x": 1}
    assert shown == "" and parser.done


def test_hermes_text_that_only_looks_like_a_marker_is_shown():
    shown, calls, _ = run("hermes", list("a <tool box> and <tool_ca"))
    assert shown == "a <tool box> and <tool_ca" and calls == []


def test_hermes_bad_json_is_an_error_call_not_text():
    shown, calls, _ = run("hermes", ['<tool_call>{"name": "calculator", "arguments": {"expression": }</tool_call>'])
    assert shown == "" and len(calls) == 1 and calls[0].error and "not valid JSON" in calls[0].error


def test_hermes_call_cut_off_at_the_end():
    _, calls, _ = run("hermes", ['<tool_call>{"name": "calculator", "argu'])
    assert len(calls) == 1 and "cut off" in calls[0].error


LLAMA = '{"name": "current_datetime", "parameters": {"timezone": "Europe/Paris"}}'


@pytest.mark.parametrize("chunks", splits("  " + LLAMA))
def test_llama3_json_answer_is_a_call(chunks):
    shown, calls, _ = run("llama3", chunks)
    assert shown.strip() == "" and [(c.name, c.arguments) for c in calls] == [
        ("current_datetime", {"timezone": "Europe/Paris"})]


@pytest.mark.parametrize("chunks", splits('<|python_tag|>' + LLAMA + '; {"name": "b", "parameters": {}}'))
def test_llama3_python_tag_and_several_calls(chunks):
    shown, calls, _ = run("llama3", chunks)
    assert shown == "" and [c.name for c in calls] == ["current_datetime", "b"]


def test_llama3_json_that_is_not_a_call_is_shown():
    answer = '{"city": "Paris", "country": "France"}'
    shown, calls, _ = run("llama3", list(answer))
    assert shown == answer and calls == []
    shown, calls, _ = run("llama3", ["The answer is ", LLAMA])  # not at the start: prose
    assert calls == [] and shown == "The answer is " + LLAMA


MISTRAL = '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "7*6"}, "id": "abcdefghi"}]'


@pytest.mark.parametrize("chunks", splits(MISTRAL))
def test_mistral_marker_and_array(chunks):
    shown, calls, _ = run("mistral", chunks)
    assert shown == "" and [(c.name, c.arguments) for c in calls] == [("calculator", {"expression": "7*6"})]


@pytest.mark.parametrize("chunks", splits(MISTRAL[len("[TOOL_CALLS]"):]))
def test_mistral_array_without_its_hidden_marker(chunks):
    shown, calls, _ = run("mistral", chunks)
    assert shown == "" and [c.name for c in calls] == ["calculator"]


def test_mistral_v11_named_form_and_links_stay_text():
    _, calls, _ = run("mistral", list('[TOOL_CALLS]calculator[ARGS]{"expression": "1+1"}'))
    assert [(c.name, c.arguments) for c in calls] == [("calculator", {"expression": "1+1"})]
    shown, calls, _ = run("mistral", list("[a link](https://example.org) and [1, 2]"))
    assert shown == "[a link](https://example.org) and [1, 2]" and calls == []


def test_family_from_template():
    assert family_for("{{ '<tool_call>' }}") == "hermes"
    assert family_for("[AVAILABLE_TOOLS] {{ tools }}") == "mistral"
    assert family_for("<|start_header_id|>ipython<|end_header_id|>") == "llama3"
    assert family_for("{{ '<|im_start|>' }}") == "hermes"
    assert family_for("", "mistral") == "mistral"


def test_json_end_skips_strings():
    text = '{"a": "}{\\"]", "b": [1, {"c": 2}]} tail'
    end = json_end(text, 0)
    assert text[end:] == " tail" and json.loads(text[:end])["b"][1]["c"] == 2
    assert json_end('{"a": "x', 0) is None


@pytest.mark.parametrize("chunks", splits('<tool_call>{"name": "say", "arguments": {"text": "a </tool_call> b"}}</tool_call>'))
def test_hermes_closing_tag_inside_a_string_is_text(chunks):
    _, calls, _ = run("hermes", chunks)
    assert [(c.name, c.arguments, c.error) for c in calls] == [("say", {"text": "a </tool_call> b"}, None)]


def test_hermes_call_without_its_closing_tag():
    shown, calls, parser = run("hermes", list('<tool_call>{"name": "a", "arguments": {}}\nSo the answer is'))
    assert [c.name for c in calls] == ["a"] and shown == "" and parser.done
    _, calls, _ = run("hermes", ['<tool_call>{"name": "a", "arguments": {}}'])
    assert [(c.name, c.error) for c in calls] == [("a", None)]


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_long_call_fed_in_small_deltas_parses_quickly():
    import time

    text = '<tool_call>{"name": "write", "arguments": {"text": "' + "wren " * 15_000 + '"}}</tool_call>'
    started = time.perf_counter()
    _, calls, _ = run("hermes", [text[i:i + 4] for i in range(0, len(text), 4)])
    assert time.perf_counter() - started < 2.0
    assert len(calls[0].arguments["text"]) == 75_000 and calls[0].error is None


def test_a_call_cut_off_or_garbled_after_its_name_keeps_the_name():
    _, calls, _ = run("hermes", ['<tool_call>\n{"name": "calculator", "arguments": {"expression": "17*2'])
    assert len(calls) == 1 and "cut off" in calls[0].error and calls[0].name == "calculator"
    _, calls, _ = run("hermes", ['<tool_call>{"name": "calculator", "arguments": {"expression": }</tool_call>'])
    assert calls[0].error and calls[0].name == "calculator"
    _, calls, _ = run("hermes", ['<tool_call>{"arguments": {"name": "x"}, "na'])
    assert calls[0].error and calls[0].name == ""  # a "name" inside the arguments is not the tool's
