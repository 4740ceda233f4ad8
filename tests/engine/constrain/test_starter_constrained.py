"""The real starter model (SmolLM2-135M) under constraints: a forced tool call parses and
validates in 10 of 10 seeds, and response_format gives valid JSON through engine.chat.send.
(MLX under a constraint: tests/engine/constrain/test_engine_constrain.py, on the tiny model.)"""

from __future__ import annotations

import asyncio
import json
import queue

import jsonschema
import pytest

from wren.engine.events import Delta, Failed, Finished, FinishReason
from wren.engine.inference.constrain import Constraint
from wren.engine.inference.presets import BUILTIN_DEFAULTS
from wren.engine.inference.sampling import SamplingParams
from wren.engine.inference.worker import GenerationRequest, ModelWorker
from wren.engine.tokenize import Tokenizer

pytestmark = pytest.mark.slow

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "description": "the city's name"},
    "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
                                            "parameters": WEATHER}}]
SYSTEM = ("You can call tools. To call one, write <tool_call>\n{\"name\": NAME, \"arguments\": ARGS}\n"
          "</tool_call>\nTools: " + json.dumps(TOOLS))
QUESTION = "What's the weather like in Lisbon today?"


@pytest.fixture(scope="module")
def starter_dir(starter_models_dir):
    from wren.engine.modelhub.registry import ModelRegistry

    return ModelRegistry(starter_models_dir).ensure_starter().path


def _worker(backend, model_dir) -> ModelWorker:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WREN_TORCH_COMPILE", "off")  # no background compile competing for the cores
        worker = ModelWorker("starter", backend, model_dir, Tokenizer.from_dir(model_dir))
        worker.loaded.result(timeout=300)
    return worker


@pytest.fixture(scope="module")
def torch_worker(starter_dir):
    from wren.engine.inference.select import resolve_backend

    worker = _worker(resolve_backend("torch-cpu"), starter_dir)
    yield worker
    worker.close()


def _answers(worker: ModelWorker, jobs) -> list[str]:
    """Each (prompt ids, constraint, seed) answered on a real ModelWorker, one after the
    other: the prompt shared by the seeds stays in the KV cache, only the answers decode.
    Sampled as a forced call is in the app, with Wren's built-in sampler (temperature 0.7 with
    the tail cut by top-k/top-p/min-p and the repetition guards). Temperature 0.7 over the whole
    vocabulary let one seed of ten wander into a never-ending string value on the 135M starter,
    and which seed did so moved with the last bits of the prompt's arithmetic."""
    texts = []
    for ids, constraint, seed in jobs:
        events: queue.Queue = queue.Queue()
        params = SamplingParams(**{**BUILTIN_DEFAULTS, "seed": seed, "max_tokens": 120})
        worker.submit(GenerationRequest(list(ids), params, events.put, constraint=constraint))
        parts = []
        while True:
            event = events.get(timeout=600)
            assert not isinstance(event, Failed), event.error
            if isinstance(event, Delta):
                parts.append(event.text)
            if isinstance(event, Finished):
                assert event.reason is FinishReason.STOP, ("".join(parts), event.reason)
                break
        texts.append("".join(parts))
    return texts


def _chat(worker: ModelWorker) -> list[int]:
    return worker.tokenizer.encode_chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])


def test_forced_tool_call_parses_and_validates_in_10_of_10_seeds(torch_worker):
    constraint = Constraint.tool_call("get_weather", WEATHER)
    texts = _answers(torch_worker, [(_chat(torch_worker), constraint, seed) for seed in range(10)])
    valid = 0
    for text in texts:
        assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>"), text
        call = json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])
        assert call["name"] == "get_weather"
        jsonschema.validate(call["arguments"], WEATHER)
        valid += 1
    assert valid == 10


def test_forced_call_opened_in_the_prompt_in_10_of_10_seeds(torch_worker):
    """As engine.tools forces a call: its opening ends the prompt, the model writes the rest."""
    opening = '<tool_call>\n{"name": "get_weather", "arguments": '
    ids = _chat(torch_worker) + torch_worker.tokenizer.encode(opening)
    constraint = Constraint.tool_call("get_weather", WEATHER, opened=True)
    for text in _answers(torch_worker, [(ids, constraint, seed) for seed in range(10)]):
        call = json.loads((opening + text).removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
        assert call["name"] == "get_weather"
        jsonschema.validate(call["arguments"], WEATHER)


# Every string bounded, so every answer closes well within max_tokens whatever the sampled
# tokens (an unbounded string let a seed ramble past the budget: a LENGTH finish, not a defect)
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4}},
    "required": ["name", "age", "languages"]}


def test_response_format_json_schema_through_engine_send(starter_models_dir, wren_home):
    from wren.engine.api import Engine
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.records import SendOptions
    from wren.engine.store import Store

    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}

    async def main():
        engine = Engine(Store(wren_home / "wren.sqlite3"), ModelRegistry(starter_models_dir))
        await engine.models.load(backend="torch-cpu")
        conv = await engine.conversations.create()
        answers = []
        for seed in range(2):
            options = SendOptions(sampling=SamplingParams(seed=seed, temperature=0.7, max_tokens=256),
                                  response_format=fmt)
            events = [e async for e in engine.chat.send(conv.id, "Describe a famous programmer as JSON.", options)]
            answers.append((events, "".join(e.text for e in events if isinstance(e, Delta))))
        await engine.close()
        return answers

    for events, text in asyncio.run(main()):
        assert events[-1].reason is FinishReason.STOP, text
        jsonschema.validate(json.loads(text), PERSON)
