"""Constrained decoding: random schemas and random logits always give valid instances; the
tool-call wrappers of each family; lazy calls in free text; the sampler's order; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.engine.constrain.vocab import char_tokenizer
from wren.engine.inference.constrain import Constraint, ConstraintError
from wren.engine.inference.sampling import Sampler, SamplingParams

MAX_TOKENS = 4000  # far above what any example needs; reaching it fails the test


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return char_tokenizer(tmp_path_factory.mktemp("chars"))


@pytest.fixture(scope="module")
def tok_special(tmp_path_factory):
    """A vocabulary that holds the call markers as special tokens, as Qwen's and Mistral's do."""
    return char_tokenizer(tmp_path_factory.mktemp("chars-special"),
                          specials=("<tool_call>", "</tool_call>", "[TOOL_CALLS]"))


def run(tok, constraint: Constraint, seed: int, params: SamplingParams | None = None,
        prefix: str = "", logit_scale: float = 3.0) -> tuple[str, Sampler]:
    """Sample with random logits until an end-of-turn token; the text (special tokens kept)."""
    params = params or SamplingParams(seed=seed, temperature=1.0)
    state = constraint.start(tok)
    sampler = Sampler(params, state)
    rng = np.random.default_rng(seed)
    out: list[int] = []
    for token in tok.encode(prefix) if prefix else []:
        state.advance(token)  # text the model wrote before the part under test
        out.append(token)
    for _ in range(MAX_TOKENS):
        logits = (rng.standard_normal(tok.vocab_size) * logit_scale).astype(np.float32)
        token = sampler(logits, out)
        if token in tok.eos_ids:
            return tok.decode(out, skip_special_tokens=False), sampler
        out.append(token)
    raise AssertionError(f"no end of turn after {MAX_TOKENS} tokens: {tok.decode(out)[:300]!r}")


# -- random schemas ----------------------------------------------------------------------

_NAMES = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
_WORDS = st.text(alphabet="abcxyz -", min_size=1, max_size=6)


def _leaves():
    def integer(bounds):
        lo, span = bounds
        schema: dict = {"type": "integer"}
        if lo is not None:
            schema.update(minimum=lo, maximum=lo + span)
        return schema

    return st.one_of(
        st.just({"type": "string"}),
        st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(1, 8)),
        st.tuples(st.none() | st.integers(-50, 50), st.integers(0, 100)).map(integer),
        st.just({"type": "number"}),
        st.just({"type": "boolean"}),
        st.lists(_WORDS, min_size=1, max_size=4, unique=True).map(lambda v: {"enum": v}),
        st.lists(st.integers(-9, 9), min_size=1, max_size=3, unique=True).map(lambda v: {"enum": v}),
    )


def _objects(children):
    props = st.dictionaries(_NAMES, children, min_size=0, max_size=4)
    return props.flatmap(lambda p: st.lists(st.sampled_from(sorted(p)) if p else st.nothing(),
                                            unique=True).map(
        lambda req: {"type": "object", "properties": p, "required": req}))


def _arrays(children):
    def array(items, bounds):
        schema = {"type": "array", "items": items}
        if bounds is not None:
            schema.update(minItems=bounds[0], maxItems=bounds[0] + bounds[1])
        return schema

    return st.builds(array, children, st.none() | st.tuples(st.integers(0, 2), st.integers(0, 3)))


_VALUES = st.recursive(_leaves(), lambda c: st.one_of(_objects(c), _arrays(c)), max_leaves=8)
SCHEMAS = _objects(_VALUES)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=SCHEMAS, seed=st.integers(0, 2**32 - 1), strict=st.booleans(),
       temperature=st.sampled_from([0.0, 0.7, 1.0, 1.5]), top_k=st.sampled_from([0, 5]))
def test_random_schema_and_random_logits_always_give_a_valid_instance(tok, schema, seed, strict,
                                                                        temperature, top_k):
    params = SamplingParams(seed=seed, temperature=temperature, top_k=top_k, top_p=0.9)
    text, sampler = run(tok, Constraint.json_schema(schema, strict=strict), seed, params)
    value = json.loads(text)
    jsonschema.validate(value, schema)
    assert sampler.constraint.complete
    if strict:  # closed objects: only the listed properties
        assert set(value) <= set(schema["properties"])


@settings(max_examples=15, deadline=None)
@given(schema=SCHEMAS, seed=st.integers(0, 2**32 - 1), family=st.sampled_from(["hermes", "llama3"]))
def test_forced_tool_call_parses_and_validates(tok, schema, seed, family):
    text, _ = run(tok, Constraint.tool_call("look_up", schema, family=family), seed)
    if family == "hermes":
        assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")
        call = json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])
        arguments = call["arguments"]
    else:
        call = json.loads(text)
        arguments = call["parameters"]
    assert call["name"] == "look_up"
    jsonschema.validate(arguments, schema)
    assert set(arguments) <= set(schema["properties"])  # tool calls are strict by default


# -- families and markers ----------------------------------------------------------------

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"]}


def test_a_marker_that_is_a_special_token_is_matched_as_that_token(tok_special):
    text, _ = run(tok_special, Constraint.tool_call("weather", WEATHER, family="mistral"), seed=3)
    assert text.startswith("[TOOL_CALLS][{") and text.endswith("}]")
    calls = json.loads(text[len("[TOOL_CALLS]"):])
    assert [c["name"] for c in calls] == ["weather"]
    jsonschema.validate(calls[0]["arguments"], WEATHER)
    state = Constraint.tool_call("weather", WEATHER, family="mistral").start(tok_special)
    # The first token is the special one: spelling the marker out character by character is refused.
    assert list(state.allowed(tok_special.vocab_size)) == [tok_special._id("[TOOL_CALLS]")]


def test_the_hermes_wrapper_uses_the_special_tokens_where_the_vocabulary_has_them(tok_special):
    state = Constraint.tool_call("weather", WEATHER).start(tok_special)
    assert list(state.allowed(tok_special.vocab_size)) == [tok_special._id("<tool_call>")]
    text, _ = run(tok_special, Constraint.tool_call("weather", WEATHER), seed=5)
    assert text.startswith("<tool_call>\n{\"name\": \"weather\", \"arguments\": {")
    assert text.endswith("}}\n</tool_call>")


# -- lazy calls (tool_choice auto) -------------------------------------------------------

def test_lazy_free_text_is_unrestricted_until_a_call_starts(tok):
    state = Constraint.tool_calls({"weather": WEATHER}).start(tok)
    allowed = set(state.allowed(tok.vocab_size).tolist())
    # every character and the end of the turn: free text is not constrained
    assert allowed == set(range(tok.vocab_size))
    for token in tok.encode("hi there, no tools needed."):
        state.advance(token)
    assert tok.eos_ids <= set(state.allowed(tok.vocab_size).tolist())


@pytest.mark.parametrize("seed", range(5))
def test_once_the_model_starts_a_call_it_must_be_a_valid_call_of_an_allowed_tool(tok, seed):
    tools = {"weather": WEATHER, "clock": {"type": "object", "properties": {}}}
    text, _ = run(tok, Constraint.tool_calls(tools), seed, prefix="let me check. <tool_call>")
    head, _, rest = text.partition("<tool_call>")
    assert head == "let me check. "
    body, closed, _after = rest.partition("\n</tool_call>")
    assert closed, f"the call was not closed: {text!r}"
    call = json.loads(body.removeprefix("\n"))
    assert call["name"] in tools
    jsonschema.validate(call["arguments"], tools[call["name"]])


def test_lazy_trigger_that_is_a_special_token(tok_special):
    state = Constraint.tool_calls({"weather": WEATHER}).start(tok_special)
    call_token = tok_special._id("<tool_call>")
    assert call_token in state.allowed(tok_special.vocab_size)
    state.advance(call_token)
    assert set(state.allowed(tok_special.vocab_size).tolist()) == set(tok_special.encode("\n"))


def test_after_a_complete_constraint_only_the_end_of_turn_is_allowed(tok):
    state = Constraint.json_schema({"type": "object", "properties": {"a": {"type": "integer"}},
                                    "required": ["a"]}, strict=True).start(tok)
    for token in tok.encode('{"a": 12}'):
        assert token in state.allowed(tok.vocab_size)
        state.advance(token)
    assert state.complete
    assert set(state.allowed(tok.vocab_size).tolist()) == set(tok.eos_ids)


def test_a_token_outside_the_mask_is_refused(tok):
    from wren.engine.inference.constrain import ConstraintViolation

    state = Constraint.json_object().start(tok)
    with pytest.raises(ConstraintViolation, match="refused token"):
        state.advance(tok.encode("x")[0])


# -- the sampler ---------------------------------------------------------------------------

def test_the_mask_comes_before_temperature_top_k_and_top_p(tok):
    """The likeliest tokens are all forbidden: top-k/top-p pick among the allowed ones
    instead of filtering the allowed ones away."""
    constraint = Constraint.json_schema({"enum": ["yes", "no"]})
    for params in (SamplingParams(temperature=0.0), SamplingParams(seed=1, top_k=1),
                   SamplingParams(seed=2, top_p=0.05), SamplingParams(seed=3, min_p=0.5)):
        state = constraint.start(tok)
        sampler = Sampler(params, state)
        logits = np.zeros(tok.vocab_size, dtype=np.float32)
        logits[tok.encode("{")[0]] = 50.0  # far likeliest, and never allowed here
        out = []
        for _ in range(10):
            token = sampler(logits, out)
            if token in tok.eos_ids:
                break
            out.append(token)
        assert json.loads(tok.decode(out)) in ("yes", "no"), params


def test_model_logits_longer_than_the_tokenizer_never_sample_the_padding(tok):
    state = Constraint.json_object().start(tok)
    logits = np.zeros(tok.vocab_size + 64, dtype=np.float32)
    logits[tok.vocab_size:] = 100.0  # padding rows of a model whose head is rounded up
    token = Sampler(SamplingParams(temperature=0.0), state)(logits, [])
    assert token < tok.vocab_size


def test_an_unconstrained_sampler_is_unchanged_by_the_hook():
    """Same seed, same ids with and without the (absent) constraint argument."""
    rng = np.random.default_rng(0)
    logits = [rng.standard_normal(300).astype(np.float32) for _ in range(30)]
    params = SamplingParams(seed=7, top_k=40, top_p=0.9, temperature=0.8)
    a, b = Sampler(params), Sampler(params, None)
    assert [a(x, []) for x in logits] == [b(x, []) for x in logits]


# -- building: bad input -------------------------------------------------------------------

@pytest.mark.parametrize("make, message", [
    (lambda: Constraint.json_schema({"type": "no-such-type"}), "cannot be enforced"),
    (lambda: Constraint.json_schema(["not", "a", "schema"]), "must be a JSON schema object"),
    (lambda: Constraint.json_schema("{not json"), "not valid JSON"),
    (lambda: Constraint.tool_call("bad name!", WEATHER), "tool name 'bad name!'"),
    (lambda: Constraint.tool_call("", WEATHER), "tool name ''"),
    (lambda: Constraint.tool_call("ok", WEATHER, family="gpt"), "unknown tool-call family 'gpt'"),
    (lambda: Constraint.tool_calls({}), "at least one tool"),
    (lambda: Constraint.tool_calls([("a", WEATHER), ("a", WEATHER)]), "tool names repeat: a"),
    (lambda: Constraint.tool_call("calc", {"type": "object", "properties": {"x": {"type": "wat"}}}),
     "tool call of calc cannot be enforced"),
    (lambda: Constraint.from_response_format({"type": "yaml"}), "response_format type must be"),
    (lambda: Constraint.from_response_format({"type": "json_schema"}), '"json_schema": {"schema"'),
    (lambda: Constraint.from_response_format("json"), "response_format must be an object"),
])
def test_bad_input_names_what_is_wrong(make, message):
    with pytest.raises(ConstraintError, match=message.replace("(", r"\(").replace("[", r"\[")):
        make()


def test_response_format_shapes(tok):
    assert Constraint.from_response_format(None) is None
    assert Constraint.from_response_format({"type": "text"}) is None
    obj = Constraint.from_response_format({"type": "json_object"})
    text, _ = run(tok, obj, seed=11)
    assert isinstance(json.loads(text), dict)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = Constraint.from_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": schema,
                                                                                  "strict": True}})
    value = json.loads(run(tok, fmt, seed=12)[0])
    jsonschema.validate(value, schema)
    assert set(value) == {"n"}


def test_tool_without_parameters_takes_an_empty_object(tok):
    text, _ = run(tok, Constraint.tool_call("now", None), seed=4)
    assert json.loads(text.split("\n")[1]) == {"name": "now", "arguments": {}}


def test_constraints_are_values(tok):
    a = Constraint.tool_call("weather", WEATHER)
    assert a == Constraint.tool_call("weather", WEATHER) and a.tool_names == ("weather",)
    assert a != Constraint.tool_call("weather", WEATHER, family="llama3")


def test_the_prepare_hook_builds_the_tokenizer_once(tok, tmp_path: Path):
    from wren.engine.inference import constrain

    constrain.prepare(tok)
    assert constrain._ll_tokenizer(tok) is constrain._ll_tokenizer(tok)


@pytest.mark.parametrize("family, opening, close", [
    ("hermes", '<tool_call>\n{"name": "weather", "arguments": ', "}\n</tool_call>"),
    ("llama3", '{"name": "weather", "parameters": ', "}"),
    ("mistral", '[TOOL_CALLS][{"name": "weather", "arguments": ', "}]"),
])
def test_a_call_opened_in_the_prompt_is_finished_with_valid_arguments(tok, family, opening, close):
    """engine.tools puts a forced call's opening in the prompt; the model writes the rest."""
    text, _ = run(tok, Constraint.tool_call("weather", WEATHER, family=family, opened=True), seed=9)
    assert text.endswith(close)
    jsonschema.validate(json.loads(text[: -len(close)]), WEATHER)
    whole = opening + text
    if family == "hermes":
        whole = whole.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>")
    call = json.loads(whole.removeprefix("[TOOL_CALLS]"))
    assert (call[0] if family == "mistral" else call)["name"] == "weather"


def test_required_call_opens_the_answer_and_text_may_follow(tok):
    """tool_calls(lazy=False), OpenAI's tool_choice "required": the answer opens with a call."""
    tools = {"weather": WEATHER, "clock": None}
    text, _ = run(tok, Constraint.tool_calls(tools, lazy=False), seed=21)
    assert text.startswith("<tool_call>\n")
    body, closed, _after = text[len("<tool_call>\n"):].partition("\n</tool_call>")
    assert closed
    call = json.loads(body)
    assert call["name"] in tools
    jsonschema.validate(call["arguments"], tools[call["name"]] or {"type": "object"})


def test_dense_and_sparse_masks_restrict_the_logits_alike(tmp_path):
    """Free text (nearly every token allowed: -inf on the few others, in place) and JSON
    structure (few allowed: gathered) give the same choices as the plain list of ids."""
    tok = char_tokenizer(tmp_path / "big", words=2000)  # ~2,060 tokens: 65 mask words
    rng = np.random.default_rng(0)
    lazy = Constraint.tool_calls({"weather": WEATHER}).start(tok)
    structured = Constraint.json_schema(WEATHER, strict=True).start(tok)
    for state, dense in ((lazy, True), (structured, False)):
        logits = rng.standard_normal(tok.vocab_size + 8).astype(np.float32)  # 8 padding rows
        allowed = state.allowed(logits.size)
        x, ids = state.restrict(logits)
        if dense:
            assert ids is None and x.size == logits.size
            assert set(np.flatnonzero(np.isfinite(x)).tolist()) == set(allowed.tolist())
            assert np.array_equal(x[allowed], logits[allowed])
            assert allowed.size > tok.vocab_size - 10  # free text: everything but the specials
        else:
            assert np.array_equal(ids, allowed) and np.array_equal(x, logits[allowed])
            assert allowed.size < 5  # the opening of a JSON object
