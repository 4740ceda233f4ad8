"""olmo2 end to end, as test_gemma3.py checks gemma3 (its helpers): a tiny random OLMo 2
(transformers' Olmo2ForCausalLM: norms after attention and the MLP, q/k norms over the
whole projections) converted by llama.cpp's convert_hf_to_gguf.py (tests/data/families/
make_gemma3_olmo2.py made both), with OLMo 2's real chat template."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.families import FP32_TOL, MESSAGES, STEPS, rewrite_gguf, transformers_greedy, wren_greedy
from wren.engine.errors import ModelFileError, UnsupportedArchitecture
from wren.engine.modelhub import ModelRegistry
from wren.engine.tokenize import Tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

DATA = Path(__file__).resolve().parents[2] / "data" / "families" / "olmo2"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return ModelRegistry(tmp_path_factory.mktemp("olmo2")).import_gguf(DATA / "model.gguf", "olmo2").path


def test_imported_gguf_answers_as_transformers_does(folder):
    from wren.engine.inference.backends.torch import TorchBackend

    assert json.loads((folder / "config.json").read_text())["model_type"] == "olmo2"
    ids = Tokenizer.from_dir(folder).encode_chat(MESSAGES)
    hf_tok = transformers.AutoTokenizer.from_pretrained(DATA / "hf")
    rendered = hf_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert Tokenizer.from_dir(folder).render_chat(MESSAGES) == rendered
    assert ids == hf_tok(rendered, add_special_tokens=False)["input_ids"]
    want_tokens, want = transformers_greedy(DATA / "hf", ids, STEPS)
    got_tokens, got = wren_greedy(TorchBackend("cpu").load(folder, dtype="float32", compile=False), ids, STEPS)
    assert got_tokens == want_tokens
    for a, b in zip(got, want, strict=True):
        assert np.abs(a - b).max() < FP32_TOL, np.abs(a - b).max()
        assert b.std() > 0.5
    assert len(set(want_tokens)) > 2


def test_hf_folder_runs_on_the_torch_model():
    from wren.engine.inference.backends.torch import TorchBackend

    ids = list(range(3, 43))
    want_tokens, want = transformers_greedy(DATA / "hf", ids, 4)
    got_tokens, got = wren_greedy(TorchBackend("cpu").load(DATA / "hf", dtype="float32", compile=False), ids, 4)
    assert got_tokens == want_tokens
    assert max(np.abs(a - b).max() for a, b in zip(got, want, strict=True)) < FP32_TOL


def test_mlx_matches_torch(folder):
    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.backends.torch import TorchBackend

    if not MLXBackend().available():
        pytest.skip("mlx is not installed")
    ids = Tokenizer.from_dir(folder).encode_chat(MESSAGES)
    for source in (folder, DATA / "hf"):
        t_tokens, t_logits = wren_greedy(TorchBackend("cpu").load(source, dtype="float32", compile=False), ids, 6)
        m_tokens, m_logits = wren_greedy(MLXBackend().load(source, dtype="float32"), ids, 6)
        assert t_tokens == m_tokens
        assert max(np.abs(a - b).max() for a, b in zip(t_logits, m_logits, strict=True)) < FP32_TOL


def test_real_template_renders_and_its_end_of_text_stops_the_answer(folder):
    tok = Tokenizer.from_dir(folder)
    assert tok.chat_template == (DATA / "chat_template.jinja").read_text(encoding="utf-8")
    chat = [*MESSAGES, {"role": "assistant", "content": "Paris, by the sea."}]
    rendered = tok.render_chat(chat, add_generation_prompt=False)
    assert "<|assistant|>\nParis, by the sea.<|endoftext|>" in rendered
    assert tok._id("<|endoftext|>") in tok.eos_ids
    assert tok.render_chat(MESSAGES).endswith("<|assistant|>\n")


@pytest.mark.parametrize(("drop", "reshape"), [("blk.1.post_ffw_norm.weight", None),
                                               (None, "blk.0.attn_k_norm.weight")])
def test_a_damaged_olmo2_tensor_is_refused_by_name(tmp_path, drop, reshape):
    from wren.engine.modelhub.gguf_import import import_gguf

    damaged = rewrite_gguf(DATA / "model.gguf", tmp_path / "damaged.gguf", drop=drop, reshape=reshape, arch="olmo2")
    with pytest.raises((ModelFileError, UnsupportedArchitecture)) as err:
        import_gguf(damaged, tmp_path / "out")
    assert (drop or reshape) in str(err.value) and "olmo2" in str(err.value), str(err.value)
