"""Granite 3.x's and Phi-4-mini's own tool-call formats, with their real templates
(tests/data/families/granite/chat_template.jinja and llama.cpp's Phi-4-mini template,
tests/data/templates/llama-cpp-microsoft-Phi-4-mini-instruct.jinja, both from llama.cpp's
models/templates/).

- The family's format is the one Wren reads for its template (Granite: `<|tool_call|>[...]`;
  Phi-4-mini: `<|tool_call|>{...}<|/tool_call|>` with its tools declared in `<|tool|>`), and
  hermes still where a template writes `<tool_call>`.
- A call streamed token by token through the real tokenizer (the tag a special token) comes
  out as the call, its text never shown; what the template itself writes for a call in the
  history parses back to that call.
- Constrained decoding holds a forced call to the format.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from tests.engine.constrain.vocab import char_tokenizer
from wren.engine.inference.constrain import Constraint
from wren.engine.inference.sampling import Sampler, SamplingParams
from wren.engine.tokenize import StreamingDetokenizer, Tokenizer
from wren.engine.tools.parse import CallParser, ParsedCall, family_for

DATA = Path(__file__).resolve().parents[2] / "data"
GRANITE_TEMPLATE = (DATA / "families" / "granite" / "chat_template.jinja").read_text(encoding="utf-8")
PHI4_TEMPLATE = (DATA / "templates" / "llama-cpp-microsoft-Phi-4-mini-instruct.jinja").read_text(encoding="utf-8")
PHI35_TEMPLATE = (DATA / "families" / "phi3" / "chat_template.jinja").read_text(encoding="utf-8")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
MESSAGES = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}


def _parse(family: str, deltas) -> tuple[str, list[ParsedCall], bool]:
    parser = CallParser(family)
    pieces = [p for d in deltas for p in parser.feed(d)] + parser.finish()
    return ("".join(p for p in pieces if isinstance(p, str)), [p for p in pieces if isinstance(p, ParsedCall)],
            parser.done)


def test_each_family_reads_its_own_format_by_its_template():
    assert family_for(GRANITE_TEMPLATE, "granite") == "granite"
    assert family_for(PHI4_TEMPLATE, "phi3") == "phi4"
    assert family_for(PHI35_TEMPLATE, "phi3") == "hermes"  # no tools in Phi-3.5's: Wren's own instructions
    assert family_for("{{ '<tool_call>' }}", "granite") == "hermes"  # a template that asks for hermes


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_granite_list_of_calls(step):
    text = 'Let me look.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, ' \
           '{"name": "get_weather", "arguments": {"city": "Oslo"}}]'
    shown, calls, _ = _parse("granite", [text[i:i + step] for i in range(0, len(text), step)])
    assert shown == "Let me look."
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("get_weather", {"city": "Paris"}, None), ("get_weather", {"city": "Oslo"}, None)]


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_phi4_calls_each_in_its_tags(step):
    text = '<|tool_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}<|/tool_call|>' \
           '<|tool_call|>{"name": "get_weather", "arguments": {"city": "<|/tool_call|>"}}<|/tool_call|>'
    shown, calls, done = _parse("phi4", [text[i:i + step] for i in range(0, len(text), step)])
    assert shown == "" and not done
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"}),
                                                      ("get_weather", {"city": "<|/tool_call|>"})]


def test_phi4_text_after_the_call_ends_the_round():
    shown, calls, done = _parse("phi4", ['<|tool_call|>{"name": "a", "arguments": {}}<|/tool_call|> I will now'])
    assert [c.name for c in calls] == ["a"] and shown == "" and done


def test_phi4_broken_call_is_an_error_that_keeps_the_name():
    _, calls, _ = _parse("phi4", ['<|tool_call|>{"name": "get_weather", "arguments": {"city": }<|/tool_call|>'])
    assert calls[0].name == "get_weather" and calls[0].error and "JSON" in calls[0].error


def _tokenizer(tmp_path: Path, template: str, specials: tuple[str, ...]) -> Tokenizer:
    """A character vocabulary holding `specials`, with `template` as its chat template."""
    char_tokenizer(tmp_path, specials=specials)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text()) | {"chat_template": template}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return Tokenizer.from_dir(tmp_path)


def test_phi4_template_declares_the_tools_and_its_history_call_parses_back(tmp_path):
    tok = _tokenizer(tmp_path, PHI4_TEMPLATE, ("<|tool_call|>", "<|/tool_call|>", "<|end|>"))
    prompt = tok.render_chat(MESSAGES, tools=TOOLS)
    assert '<|tool|>{"name": "get_weather"' in prompt and prompt.endswith("<|assistant|>")
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    # (llama.cpp's template iterates `tools` whenever it is defined: it renders chats with tools)
    history = tok.render_chat(MESSAGES + [{"role": "assistant", "content": "", "tool_calls": [call]}],
                              add_generation_prompt=False, tools=TOOLS)
    written = history.split("<|assistant|>", 1)[1].removesuffix(tok.eos_token or "").removesuffix("<|end|>")
    _, calls, _ = _parse("phi4", [written])
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]


def test_granite_template_offers_the_tools_and_asks_for_its_format():
    tok = Tokenizer.from_dir(DATA / "families" / "granite" / "hf")
    assert tok.chat_template == GRANITE_TEMPLATE
    prompt = tok.render_chat(MESSAGES, tools=TOOLS)
    assert "<|start_of_role|>available_tools<|end_of_role|>" in prompt and '"get_weather"' in prompt
    assert "respond only with <|tool_call|> followed by a JSON list" in prompt


def test_granite_call_streamed_through_the_real_tokenizer_keeps_its_tag():
    """<|tool_call|> is a special token in Granite's vocabulary: the stream keeps its text."""
    tok = Tokenizer.from_dir(DATA / "families" / "granite" / "hf")
    answer = '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    ids = tok.encode(answer, special=True)
    assert tok._id("<|tool_call|>") in ids and tok._id("<|tool_call|>") in tok.special_ids
    stream = StreamingDetokenizer(tok)
    shown, calls, _ = _parse("granite", [stream.feed(i) for i in ids] + [stream.flush()])
    assert shown == "" and [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize(("family", "opening", "closing"), [
    ("granite", "<|tool_call|>[", "]"), ("phi4", "<|tool_call|>", "<|/tool_call|>")])
def test_constrained_call_is_written_in_the_family_format(tmp_path, family, opening, closing):
    tok = char_tokenizer(tmp_path, specials=("<|tool_call|>", "<|/tool_call|>"))
    state = Constraint.tool_call("get_weather", WEATHER, family=family).start(tok)
    sampler = Sampler(SamplingParams(seed=5, temperature=1.0), state)
    rng, out = np.random.default_rng(5), []
    for _ in range(400):
        token = sampler((rng.standard_normal(tok.vocab_size) * 3).astype(np.float32), out)
        if token in tok.eos_ids:
            break
        out.append(token)
    text = tok.decode(out, skip_special_tokens=False)
    assert text.startswith(opening) and text.endswith(closing), text
    _, calls, _ = _parse(family, [text])
    assert [c.name for c in calls] == ["get_weather"] and calls[0].error is None
    jsonschema.validate(calls[0].arguments, WEATHER)
