"""Constraints and damaged logits through the engine: engine.chat.send's response_format, `wren ask
--schema`, and NaN logits failing the answer (scripted backend: the one-at-a-time path;
the tiny torch model: the batched path)."""

from __future__ import annotations

import asyncio
import json
import shutil

import jsonschema
import numpy as np
import pytest

from wren.engine.errors import InvalidRequest
from wren.engine.events import Delta, Failed, FailureKind, Finished, FinishReason
from wren.engine.inference.backends.scripted import ScriptedBackend
from wren.engine.records import SendOptions
from wren.engine.terminal.main import main

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


async def _answer(engine, text: str, options: SendOptions | None = None) -> list:
    conv = await engine.conversations.create()
    events = [event async for event in engine.chat.send(conv.id, text, options)]
    await engine.close()
    return events


def _text(events) -> str:
    return "".join(e.text for e in events if isinstance(e, Delta))


def test_response_format_ends_the_answer_where_the_json_ends(make_engine):
    reply = '{"city": "Paris"} and then the model would have gone on talking'
    plain = asyncio.run(_answer(make_engine(reply), "Where?"))
    assert _text(plain) == reply  # without a constraint the whole reply streams
    fmt = {"type": "json_schema", "json_schema": {"name": "place", "schema": CITY}}
    events = asyncio.run(_answer(make_engine(reply), "Where?", SendOptions(response_format=fmt)))
    assert json.loads(_text(events)) == {"city": "Paris"}
    assert events[-1].reason is FinishReason.STOP


def test_response_format_forces_json_where_the_model_would_write_prose(make_engine):
    """The scripted model wants to say "Sure!": its first token is not allowed, so the
    answer opens a JSON object instead."""
    events = asyncio.run(_answer(make_engine("Sure! Here it is."), "JSON please",
                                 SendOptions(response_format={"type": "json_object"},
                                             sampling=None)))
    text = _text(events)
    assert text.startswith("{") and "Sure" not in text


def test_a_bad_response_format_is_refused_before_anything_runs():
    with pytest.raises(InvalidRequest, match="response_format type must be"):
        SendOptions(response_format={"type": "xml"})
    with pytest.raises(InvalidRequest, match="cannot be enforced"):
        SendOptions(response_format={"type": "json_schema", "json_schema": {"schema": {"type": "wat"}}})
    assert SendOptions().constraint is None
    assert SendOptions(response_format={"type": "json_object"}).constraint is not None


class NaNBackend(ScriptedBackend):
    """A scripted model whose logits are all NaN from the first token: damaged weights."""

    def load(self, model_dir, **options):
        model = super().load(model_dir, **options)
        clean = model._logits
        model._logits = lambda: np.full_like(clean(), np.nan)
        return model


def test_nan_logits_fail_the_answer_naming_the_weights_file(make_engine, tiny_model_dir):
    engine = make_engine(backend=NaNBackend("anything"))
    events = asyncio.run(_answer(engine, "hello?"))
    failed = [e for e in events if isinstance(e, Failed)]
    assert len(failed) == 1 and failed[0].kind is FailureKind.MODEL
    assert str(tiny_model_dir / "model.safetensors") in failed[0].error
    assert "NaN or infinite" in failed[0].error and "Re-import" in failed[0].error
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.ERROR
    assert _text(events) == ""


@pytest.fixture
def installed(wren_home, tiny_model_dir, tmp_path):
    """The tiny model, and a copy of it whose final norm holds NaN (a damaged file)."""
    from safetensors.numpy import load_file, save_file

    from wren.engine.modelhub.registry import ModelRegistry

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    weights = load_file(broken / "model.safetensors")
    weights["model.norm.weight"] = np.full_like(weights["model.norm.weight"], np.nan)
    save_file(weights, broken / "model.safetensors")
    registry = ModelRegistry(wren_home / "models")
    registry.register_folder(tiny_model_dir, name="tiny")
    registry.register_folder(broken, name="broken")
    return broken


BOUNDED = {"type": "object", "additionalProperties": False, "required": ["n", "pick"],
           "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                          "pick": {"enum": ["left", "right"]}, "ok": {"type": "boolean"}}}


def test_wren_ask_schema_answers_valid_json(installed, capsys, tmp_path):
    seed = 1
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(BOUNDED))
    code = main(["ask", "--model", "tiny", "--backend", "torch-cpu", "--seed", str(seed),
                 "--temperature", "1.0", "--max-tokens", "64", "--schema", str(schema_file), "pick one"])
    out = capsys.readouterr().out
    assert code == 0
    jsonschema.validate(json.loads(out), BOUNDED)


def test_wren_ask_schema_as_json_text(installed, capsys):
    code = main(["ask", "--model", "tiny", "--backend", "torch-cpu", "--seed", "3", "--max-tokens", "64",
                 "--schema", json.dumps(BOUNDED), "--json", "pick one"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    text = "".join(line["text"] for line in lines if line["type"] == "delta")
    jsonschema.validate(json.loads(text), BOUNDED)


@pytest.mark.parametrize("schema, message", [
    ("{not json", "not valid JSON"),
    ("/no/such/schema.json", "no such file"),
    ('{"type": "no-such-type"}', "cannot be enforced"),
])
def test_wren_ask_bad_schema_fails_before_the_model_loads(installed, capsys, schema, message):
    assert main(["ask", "--model", "tiny", "--schema", schema, "hi"]) == 2
    assert message in capsys.readouterr().err


def test_damaged_weights_fail_wren_ask_with_the_file_named(installed, capsys):
    """The batched path (torch has KV slots) stops at NaN logits, exit status 1, never an
    empty answer with status 0; with --json as well."""
    assert main(["ask", "--model", "broken", "--backend", "torch-cpu", "--max-tokens", "8", "hello"]) == 1
    err = capsys.readouterr().err
    assert str(installed / "model.safetensors") in err and "Re-import" in err
    assert main(["ask", "--model", "broken", "--backend", "torch-cpu", "--max-tokens", "8", "--json", "hello"]) == 1
    kinds = [json.loads(line)["type"] for line in capsys.readouterr().out.splitlines()]
    assert "failed" in kinds and "delta" not in kinds


def test_mlx_decodes_under_a_constraint(tiny_model_dir):
    """The MLX backend (mlx[cpu] on Linux) through a ModelWorker: its numpy logits go through
    the same constrained sampler, in its batched scheduler (two KV slots)."""
    import queue

    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.constrain import Constraint
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.inference.worker import GenerationRequest, ModelWorker
    from wren.engine.tokenize import Tokenizer

    backend = MLXBackend()
    if not backend.available():
        pytest.skip(f"MLX cannot run here: {backend.unavailable_reason()}")
    tokenizer = Tokenizer.from_dir(tiny_model_dir)
    worker = ModelWorker("tiny", backend, tiny_model_dir, tokenizer)
    try:
        worker.loaded.result(timeout=300)
        prompt = tokenizer.encode_chat([{"role": "user", "content": "pick one"}])
        sinks = []
        for seed in range(2):  # together: the batched decode step samples both
            events: queue.Queue = queue.Queue()
            worker.submit(GenerationRequest(prompt, SamplingParams(seed=seed, temperature=1.0, max_tokens=64),
                                            events.put, constraint=Constraint.json_schema(BOUNDED)))
            sinks.append(events)
        for events in sinks:
            parts = []
            while not isinstance(event := events.get(timeout=120), Finished):
                assert not isinstance(event, Failed), event.error
                if isinstance(event, Delta):
                    parts.append(event.text)
            assert event.reason is FinishReason.STOP
            jsonschema.validate(json.loads("".join(parts)), BOUNDED)
    finally:
        worker.close()
