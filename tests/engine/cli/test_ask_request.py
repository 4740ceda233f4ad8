"""A `wren ask` question as the resident engine reads it off its socket
(engine/terminal/ask_request.py): what a well-formed line gives, and the error each kind of
bad line gets, naming what was wrong."""

from __future__ import annotations

import json

import pytest

from wren.engine.errors import InvalidRequest
from wren.engine.inference.sampling import SamplingParams
from wren.engine.terminal.ask_request import AskRequest


def _read(line: str) -> AskRequest:
    """As the engine reads a question: a JSON line, decoded, then checked."""
    return AskRequest.from_wire(json.loads(line))


def test_a_question_crosses_the_wire_unchanged():
    asked = AskRequest(text="what is this?\n\n```notes.md\nhi\n```", title="what is this?", model="tiny",
                       backend="torch-cpu", seed=7, temperature=0.2, top_p=0.9, top_k=40, max_tokens=64,
                       logprobs=3, tools="none", tool_choice="none",
                       response_format={"type": "json_object"}, save=False, keep_alive=12.5)
    assert _read(json.dumps(asked.to_wire())) == asked


def test_only_the_text_is_needed_and_the_rest_takes_the_defaults():
    assert _read('{"text": "hi"}') == AskRequest(text="hi")
    assert AskRequest(text="hi").tool_choice == "auto" and AskRequest(text="hi").save is None


def test_nulls_leave_a_choice_to_the_engine():
    line = json.dumps({"text": "hi", "model": None, "seed": None, "temperature": None, "save": None,
                       "response_format": None, "keep_alive": None})
    assert _read(line) == AskRequest(text="hi")


def test_a_whole_number_is_a_number_where_a_real_one_is_wanted():
    request = _read('{"text": "hi", "temperature": 1, "top_p": 1, "keep_alive": 300}')
    assert (request.temperature, request.top_p, request.keep_alive) == (1.0, 1.0, 300.0)
    assert all(isinstance(v, float) for v in (request.temperature, request.top_p, request.keep_alive))


@pytest.mark.parametrize(("line", "says"), [
    ('["hi"]', "must be a JSON object, not list"),
    ('"hi"', "must be a JSON object, not str"),
    ("null", "must be a JSON object, not null"),
    ('{"title": "hi"}', "needs its 'text'"),
    ('{"text": "hi", "temprature": 0.5}', "no field 'temprature'"),
    ('{"text": "hi", "args": {}, "zz": 1}', "no field 'args', 'zz'"),
    ('{"text": 5}', "'text' must be text, not int"),
    ('{"text": null}', "'text' must be text, not null"),
    ('{"text": "hi", "title": ["a"]}', "'title' must be text, not list"),
    ('{"text": "hi", "model": 3}', "'model' must be text or null, not int"),
    ('{"text": "hi", "tools": ["a", "b"]}', "'tools' must be text or null, not list"),
    ('{"text": "hi", "tool_choice": null}', "'tool_choice' must be text, not null"),
    ('{"text": "hi", "seed": "7"}', "'seed' must be a whole number or null, not str"),
    ('{"text": "hi", "seed": 7.5}', "'seed' must be a whole number or null, not float"),
    ('{"text": "hi", "max_tokens": true}', "'max_tokens' must be a whole number or null, not True"),
    ('{"text": "hi", "temperature": "hot"}', "'temperature' must be a number or null, not str"),
    ('{"text": "hi", "temperature": false}', "'temperature' must be a number or null, not False"),
    ('{"text": "hi", "temperature": NaN}', "'temperature' must be a finite number, not nan"),
    ('{"text": "hi", "keep_alive": Infinity}', "'keep_alive' must be a finite number, not inf"),
    ('{"text": "hi", "response_format": "json"}', "'response_format' must be an object or null, not str"),
    ('{"text": "hi", "save": "yes"}', "'save' must be true, false or null, not str"),
    ('{"text": "hi", "save": 1}', "'save' must be true, false or null, not int"),
])
def test_a_bad_question_is_refused_naming_what_was_wrong(line, says):
    with pytest.raises(InvalidRequest) as refused:
        _read(line)
    assert says in str(refused.value)


def test_the_question_sets_only_the_sampling_it_names():
    base = SamplingParams(temperature=0.7, top_p=0.95, max_tokens=512, seed=None)
    assert AskRequest(text="hi").sampling(base) == base
    changed = AskRequest(text="hi", temperature=0.0, max_tokens=8, logprobs=2).sampling(base)
    assert changed == base.with_(temperature=0.0, max_tokens=8, logprobs=2)
    assert changed.top_p == 0.95  # not named: the chat's or the defaults'


def test_a_request_is_a_value():
    request = AskRequest(text="hi")
    with pytest.raises(AttributeError):
        request.text = "changed"  # type: ignore[misc]
    assert hash(AskRequest(text="hi", model="tiny")) == hash(AskRequest(text="hi", model="tiny"))
