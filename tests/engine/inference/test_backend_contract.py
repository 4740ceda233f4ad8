"""Every backend and every loaded model satisfies the explicit contract in
engine.inference.backend: each member the worker, the batch scheduler and the engine use
is there, with the protocol's parameters, and the optional capabilities are declared flags
whose defaults say what they mean."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from wren.engine.inference.backend import Backend, LoadedModel, ModelBase, Unsupported
from wren.engine.inference.backends.mlx import MLXBackend, MLXModel
from wren.engine.inference.backends.remote import RemoteBackend, RemoteModel, RemoteSpec
from wren.engine.inference.backends.scripted import ScriptedBackend, ScriptedModel
from wren.engine.inference.backends.torch import TorchBackend, TorchModel

MODEL_CLASSES = [TorchModel, ScriptedModel, RemoteModel, MLXModel]
BACKEND_CLASSES = [TorchBackend, ScriptedBackend, RemoteBackend, MLXBackend]


def _members(protocol) -> tuple[set[str], set[str]]:
    methods = {n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")}
    attributes = set(protocol.__annotations__)
    return methods, attributes


def _parameters(function) -> list[str]:
    return [p.name for p in inspect.signature(function).parameters.values() if p.name != "self"]


@pytest.mark.parametrize("cls", MODEL_CLASSES, ids=lambda c: c.__name__)
def test_model_classes_declare_every_protocol_method(cls):
    methods, _ = _members(LoadedModel)
    assert methods >= {"prefill", "decode", "decode_batch", "export_kv", "import_kv", "wait_compiled",
                       "chat_stream", "close"}
    for name in methods:
        impl = getattr(cls, name)
        wanted = _parameters(getattr(LoadedModel, name))
        have = _parameters(impl)
        assert have[: len(wanted)] == wanted, f"{cls.__name__}.{name}{have} does not take {wanted}"


@pytest.mark.parametrize("cls", BACKEND_CLASSES, ids=lambda c: c.__name__)
def test_backend_classes_take_the_protocols_load_options(cls):
    params = inspect.signature(cls.load).parameters
    assert {"model_dir", "dtype", "slots"} <= set(params), f"{cls.__name__}.load lacks a contract option"
    for name in ("available", "unavailable_reason"):
        assert callable(getattr(cls, name))


def test_defaults_are_the_documented_ones():
    class Minimal(ModelBase):
        backend = "minimal"

    m = Minimal()
    assert (m.slots, m.batched_decode, m.kv_export, m.takes_messages, m.decode_mode) == (1, False, False, False, None)
    assert m.wait_compiled(0) is None
    for call in (lambda: m.decode_batch([1], [0], [0]), lambda: m.export_kv(1), lambda: m.import_kv(None, 1)):
        with pytest.raises(Unsupported, match="minimal"):
            call()


def test_loaded_models_satisfy_the_protocol(tiny_model_dir):
    torch_model = TorchBackend().load(tiny_model_dir, dtype="float32", slots=2)
    scripted = ScriptedBackend("hi").load(tiny_model_dir, slots=4)
    remote = RemoteBackend(RemoteSpec("p", "m", "http://127.0.0.1:1/v1")).load(None)
    try:
        for model in (torch_model, scripted, remote):
            assert isinstance(model, LoadedModel), type(model).__name__
        assert (torch_model.slots, torch_model.batched_decode, torch_model.kv_export) == (2, True, True)
        assert torch_model.decode_mode == "eager" and torch_model.wait_compiled(0) == "eager"
        assert (scripted.slots, scripted.batched_decode, scripted.kv_export) == (1, False, True)
        assert remote.takes_messages and not remote.kv_export and remote.backend == "remote"
        with pytest.raises(Unsupported, match="chat messages, not token ids"):
            remote.prefill([1], 0)
        one = TorchBackend().load(tiny_model_dir, dtype="float32", slots=1)
        assert not one.batched_decode
        logits = torch_model.prefill([5, 6, 7], 0, slot=1)
        assert isinstance(logits, np.ndarray) and logits.shape == (torch_model.vocab_size,)
    finally:
        torch_model.close()
        scripted.close()


@pytest.mark.skipif(not MLXBackend().available(), reason=f"{MLXBackend().unavailable_reason()}")
def test_mlx_model_satisfies_the_protocol(tiny_model_dir):
    model = MLXBackend().load(tiny_model_dir, dtype="float32", slots=2)
    assert isinstance(model, LoadedModel) and model.kv_export and model.batched_decode == (model.slots > 1)


def test_backends_satisfy_the_backend_protocol():
    for backend in (TorchBackend(), ScriptedBackend(), RemoteBackend(RemoteSpec("p", "m", "https://x.example/v1")),
                    MLXBackend()):
        assert isinstance(backend, Backend), type(backend).__name__


def test_no_capability_probing_left():
    """The worker, scheduler, generation loop and engine read declared flags: no hasattr,
    getattr-with-default or signature probing of models and backends."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    for rel in ("engine/inference/worker.py", "engine/inference/batch.py", "engine/inference/generate.py"):
        text = (root / rel).read_text()
        for probe in ("hasattr(", "inspect.signature", "_accepts(", "getattr(model", "getattr(self.model"):
            assert probe not in text, f"{rel} still probes with {probe}"
