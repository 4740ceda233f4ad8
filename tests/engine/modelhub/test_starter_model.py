"""The real starter model (SmolLM2-135M-Instruct Q4_1) converted and checked against the reference.

Acceptance test for the conversion: transformers' float32 LlamaForCausalLM on the converted
folder reproduces the reference greedy ids, which it cannot if the Q/K un-permute is wrong.
"""

from __future__ import annotations

import json
import time

import pytest

from wren.engine.modelhub import ModelSource
from wren.engine.tokenize import Tokenizer

# the haiku case runs the full 32 tokens; the four shorter ones cover the check in a few seconds
GREEDY_CASES = [0, 1, 3, 4]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def starter(starter_registry):
    return starter_registry.ensure_starter()


def test_starter_record(starter):
    assert starter.source == ModelSource.STARTER and starter.architecture == "llama"
    assert starter.context_length == 8192 and starter.quantization == "Q4_1"
    assert 134_000_000 < starter.parameters < 135_000_000


def test_starter_config(starter):
    config = json.loads((starter.path / "config.json").read_text())
    assert {
        "model_type": "llama", "num_hidden_layers": 30, "hidden_size": 576, "num_attention_heads": 9,
        "num_key_value_heads": 3, "head_dim": 64, "intermediate_size": 1536, "vocab_size": 49152,
        "tie_word_embeddings": True, "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "torch_dtype": "float32",
    }.items() <= config.items()


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_second_ensure_is_fast_and_changes_nothing(starter_registry, starter):
    stamp = (starter.path / "model.gguf").stat().st_mtime_ns
    began = time.perf_counter()
    again = starter_registry.ensure_starter()
    assert time.perf_counter() - began < 0.5
    assert again == starter and (starter.path / "model.gguf").stat().st_mtime_ns == stamp


@pytest.fixture(scope="module")
def float32_model(starter):
    """transformers' Llama over the file's weights dequantized exactly to float32 (read the
    way Wren's torch backend reads model.gguf): how the reference ids were made."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from wren.engine.inference.backends import read_model_config
    from wren.engine.inference.models.weights import dense, open_weights

    # one thread: on a loaded 2-core machine two spinning torch threads run many times slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    config = read_model_config(starter.path)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
    source = open_weights(starter.path, config)
    get = dense(source.get, "cpu", torch.float32)
    state = {name: get(name) for name in source.names}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied
    model.load_state_dict(state, strict=True)
    yield model
    torch.set_num_threads(threads)


@pytest.mark.parametrize("case", GREEDY_CASES)
def test_greedy_decoding_matches_reference(float32_model, starter, reference, case):
    import torch

    want = reference["cases"][case]
    tokenizer = Tokenizer.from_dir(starter.path)
    prompt = tokenizer.encode_chat([{"role": "user", "content": want["question"]}])
    assert prompt == want["prompt_ids"]
    with torch.no_grad():
        out = float32_model.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False,
                                     eos_token_id=sorted(tokenizer.eos_ids), pad_token_id=tokenizer.eos_id)
    got = [i for i in out[0, len(prompt):].tolist() if i not in tokenizer.eos_ids]
    assert got == want["greedy_ids"]
    assert tokenizer.decode(got) == want["greedy_text"]
