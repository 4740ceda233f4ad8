"""gemma3 end to end, from files Wren's tests did not make: a tiny random Gemma 3 (transformers'
Gemma3ForCausalLM) converted by llama.cpp's convert_hf_to_gguf.py (tests/data/families/
make_gemma3_olmo2.py made both; its docstring says what the fixture exercises: five
sliding-window layers and a global one, two RoPE bases, linear scaling, soft-capped logits).

- The GGUF, imported as `wren models import` imports it, answers greedily with transformers'
  tokens on the same rendered prompt, its logits within FP32_TOL of transformers' at every step
  (float32 weights and activations on both sides, transformers' eager attention).
- The HF folder (safetensors: norms stored without gemma's + 1) runs the same.
- MLX (mlx-lm's gemma3_text) gives torch's logits within FP32_TOL, with the embedding
  scale rounded as mlx-lm rounds it.
- The real template renders in Wren's sandbox, and <end_of_turn> is a stop token.
- A missing or misshapen gemma3 tensor is refused at import, by name.
The sliding-window cache has tests of its own (test_sliding_window_cache.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.families import FP32_TOL, MESSAGES, STEPS, rewrite_gguf, transformers_greedy, wren_greedy
from wren.engine.errors import ModelFileError, UnsupportedArchitecture
from wren.engine.modelhub import ModelRegistry
from wren.engine.tokenize import Tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

DATA = Path(__file__).resolve().parents[2] / "data" / "families" / "gemma3"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    registry = ModelRegistry(tmp_path_factory.mktemp("gemma3"))
    return registry.import_gguf(DATA / "model.gguf", "gemma3").path


def prompt(folder: Path) -> list[int]:
    return Tokenizer.from_dir(folder).encode_chat(MESSAGES)


def test_imported_gguf_answers_as_transformers_does(folder):
    from wren.engine.inference.backends.torch import TorchBackend

    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "gemma3_text"
    assert config["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    ids = prompt(folder)
    hf_tok = transformers.AutoTokenizer.from_pretrained(DATA / "hf")
    rendered = hf_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert Tokenizer.from_dir(folder).render_chat(MESSAGES) == rendered
    assert ids == hf_tok(rendered, add_special_tokens=False)["input_ids"]
    assert len(ids) > 4 * config["sliding_window"]  # the windows matter

    want_tokens, want = transformers_greedy(DATA / "hf", ids, STEPS)
    got_tokens, got = wren_greedy(TorchBackend("cpu").load(folder, dtype="float32", compile=False), ids, STEPS)
    assert got_tokens == want_tokens
    for a, b in zip(got, want, strict=True):
        assert np.abs(a - b).max() < FP32_TOL, np.abs(a - b).max()
        assert b.std() > 0.5  # the fixture's logits are not flat
    assert len(set(want_tokens)) > 2  # nor its answer one token repeated


def test_hf_folder_runs_on_the_torch_model():
    from wren.engine.inference.backends.torch import TorchBackend

    ids = list(range(3, 43))
    want_tokens, want = transformers_greedy(DATA / "hf", ids, 4)
    got_tokens, got = wren_greedy(TorchBackend("cpu").load(DATA / "hf", dtype="float32", compile=False), ids, 4)
    assert got_tokens == want_tokens
    assert max(np.abs(a - b).max() for a, b in zip(got, want, strict=True)) < FP32_TOL


def test_the_gguf_stores_gemma_norms_plus_one(folder):
    """llama.cpp's converter adds 1 to every gemma norm weight; Wren reads the sum back as
    is (the HF folder's weight + 1, bit for bit) and the torch model multiplies by it."""
    from wren.engine.inference.models.weights import open_weights

    config = json.loads((folder / "config.json").read_text())
    gguf, hf = open_weights(folder, config), open_weights(DATA / "hf", json.loads((DATA / "hf" / "config.json").read_text()))
    for name in ("model.norm.weight", "model.layers.2.post_feedforward_layernorm.weight",
                 "model.layers.5.self_attn.q_norm.weight"):
        assert torch.equal(gguf.get(name), hf.get(name))
    from safetensors import safe_open

    with safe_open(str(DATA / "hf" / "model.safetensors"), "pt") as raw:
        stored = raw.get_tensor("model.norm.weight")
    assert torch.equal(gguf.get("model.norm.weight"), stored + 1.0)


@pytest.fixture
def bf16_embedding_scale():
    """The torch model with mlx-lm's gemma3 embedding scale: sqrt(hidden_size) rounded to
    bfloat16 (mlx-lm rounds it so for every dtype; transformers keeps it in the activation
    dtype, float32 here). 0.13% apart at this size, which moves the logits by ~0.1."""
    from wren.engine.inference.families import gemma3

    plain = gemma3.FAMILY.model_args

    def rounded(config, layers):
        args = plain(config, layers)
        args["embedding_multiplier"] = float(torch.tensor(args["embedding_multiplier"]).bfloat16())
        return args

    object.__setattr__(gemma3.FAMILY, "model_args", rounded)  # a frozen dataclass
    yield
    object.__setattr__(gemma3.FAMILY, "model_args", plain)


def test_mlx_matches_torch(folder, bf16_embedding_scale):
    """mlx-lm's gemma3_text on the imported folder (its config.json is Wren's; an HF folder
    saved by transformers 5 nests the RoPE bases where mlx-lm does not look)."""
    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.backends.torch import TorchBackend

    if not MLXBackend().available():
        pytest.skip("mlx is not installed")
    ids = prompt(folder)
    t_tokens, t_logits = wren_greedy(TorchBackend("cpu").load(folder, dtype="float32", compile=False), ids, 6)
    m_tokens, m_logits = wren_greedy(MLXBackend().load(folder, dtype="float32"), ids, 6)
    assert t_tokens == m_tokens
    assert max(np.abs(a - b).max() for a, b in zip(t_logits, m_logits, strict=True)) < FP32_TOL


def test_real_template_renders_and_end_of_turn_stops_the_answer(folder):
    tok = Tokenizer.from_dir(folder)
    template = (DATA / "chat_template.jinja").read_text(encoding="utf-8")
    assert tok.chat_template == template  # the converter carried it into the GGUF unchanged
    chat = [*MESSAGES, {"role": "assistant", "content": "Paris, by the sea."}]
    rendered = tok.render_chat(chat, add_generation_prompt=False)
    assert "<start_of_turn>model\nParis, by the sea.<end_of_turn>" in rendered
    assert tok._id("<end_of_turn>") in tok.eos_ids  # the answer's end is a stop token
    assert tok.render_chat(MESSAGES).endswith("<start_of_turn>model\n")


@pytest.mark.parametrize("damage", ["missing", "misshapen"])
def test_a_damaged_gemma3_tensor_is_refused_by_name(tmp_path, damage):
    from wren.engine.modelhub.gguf_import import import_gguf

    name = "blk.3.post_ffw_norm.weight" if damage == "missing" else "blk.2.attn_q_norm.weight"
    kwargs = {"drop": name} if damage == "missing" else {"reshape": name}
    intact = rewrite_gguf(DATA / "model.gguf", tmp_path / "intact.gguf")
    import_gguf(intact, tmp_path / "intact")  # the rewriting alone breaks nothing
    damaged = rewrite_gguf(DATA / "model.gguf", tmp_path / f"{damage}.gguf", **kwargs)
    with pytest.raises((ModelFileError, UnsupportedArchitecture)) as err:
        import_gguf(damaged, tmp_path / "out")
    message = str(err.value)
    assert name in message and "gemma3" in message, message
    assert not (tmp_path / "out").exists()


def test_a_multimodal_config_runs_its_text_model(tmp_path):
    """Gemma 3 4B-27B checkpoints are multimodal: model_type "gemma3", the text model's
    config under text_config and its weights under language_model."""
    from safetensors.torch import load_file, save_file

    from wren.engine.inference.backends.torch import TorchBackend

    text = json.loads((DATA / "hf" / "config.json").read_text())
    folder = tmp_path / "mm"
    shutil.copytree(DATA / "hf", folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma3", "text_config": text,
                                                    "architectures": ["Gemma3ForConditionalGeneration"]}))
    weights = load_file(str(DATA / "hf" / "model.safetensors"))
    save_file({"model.language_model." + k.removeprefix("model."): v for k, v in weights.items()},
              str(folder / "model.safetensors"))
    ids = list(range(3, 30))
    want = TorchBackend("cpu").load(DATA / "hf", dtype="float32", compile=False).prefill(ids, 0)
    got = TorchBackend("cpu").load(folder, dtype="float32", compile=False).prefill(ids, 0)
    assert np.array_equal(got, want)


def test_mlx_sliding_window_caches_go_back_by_starting_over_and_export_whole(folder, bf16_embedding_scale):
    """mlx-lm keeps gemma3's sliding layers in rotating caches of the window's size, which
    cannot be rewound once wrapped: the session starts over instead of failing, and a
    prefix export carries the rings whole."""
    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.generate import KVSession

    if not MLXBackend().available():
        pytest.skip("mlx is not installed")
    mlx = MLXBackend().load(folder, dtype="float32", slots=1)
    torch_model = TorchBackend("cpu").load(folder, dtype="float32", compile=False, slots=1)
    first, second = list(range(3, 63)), list(range(3, 53)) + [7, 9, 11]
    session = KVSession(mlx)
    session.prefill(first)
    logits, reused = session.prefill(second)  # back 10 positions: past the window of 8
    assert reused == 0
    assert np.abs(logits - torch_model.prefill(second, 0)).max() < FP32_TOL
    extra = [5, 17, 29, 31, 37]
    for i, token in enumerate(extra):  # one token at a time: the rings rotate
        pos = len(second) + i
        assert np.abs(mlx.decode(token, pos) - torch_model.decode(token, pos)).max() < FP32_TOL
    n = len(second) + len(extra)
    state, nbytes = mlx.export_kv(n)
    assert nbytes > 0
    mlx.prefill(first, 0)  # another conversation
    mlx.import_kv(state, n)
    for i, token in enumerate([41, 43, 47]):
        assert np.abs(mlx.decode(token, n + i) - torch_model.decode(token, n + i)).max() < FP32_TOL
