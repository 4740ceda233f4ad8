"""qwen3moe end to end from a file Wren's tests did not make: a tiny random Qwen3-MoE made
with transformers' own class and converted by llama.cpp's convert_hf_to_gguf.py
(tests/data/families/make_qwen3moe.py), imported as `wren models import` imports it.

- Greedy answer equals transformers' on the same rendered prompt, logits within FP32_TOL at
  every step (float32 weights and activations on both sides).
- The router's chosen experts agree with transformers' on every token of every layer
  (both routers hooked), in the prompt and in each decoded step.
- Bad files: a router or expert tensor of the wrong shape, or an expert count in the
  metadata the tensors do not have, refused at import naming the tensor.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wren.engine.errors import ModelFileError
from wren.engine.modelhub import ModelRegistry
from wren.engine.tokenize import Tokenizer

torch = pytest.importorskip("torch")

DATA = Path(__file__).resolve().parents[2] / "data" / "families" / "qwen3moe"
# float32 on both sides; measured: at most ~3e-6 on logits with std ~2.
FP32_TOL = 1e-4
STEPS = 10
MESSAGES = [
    {"role": "system", "content": "You are a small brown bird with a loud voice."},
    {"role": "user", "content": "What is the capital of France? Please write a short poem about the sea."},
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return ModelRegistry(tmp_path_factory.mktemp("qwen3moe")).import_gguf(DATA / "model.gguf", "qwen3moe").path


def _transformers(ids: list[int], steps: int):
    """transformers' greedy tokens, last logits per step, and each layer's chosen experts
    for every position of the final sequence (one full pass, no cache, at the end)."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    model = transformers.AutoModelForCausalLM.from_pretrained(DATA / "hf", dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    ids, logits = list(ids), []
    with torch.no_grad():
        for _ in range(steps):
            row = model(torch.tensor([ids])).logits[0, -1].numpy()
            logits.append(row)
            ids.append(int(row.argmax()))
        chosen: dict[int, torch.Tensor] = {}
        hooks = [layer.mlp.gate.register_forward_hook(
                 lambda _m, _i, out, i=i: chosen.__setitem__(i, out[2].clone()))
                 for i, layer in enumerate(model.model.layers)]
        model(torch.tensor([ids[:-1]]))  # the positions Wren read: the prompt and each decoded token
        for hook in hooks:
            hook.remove()
    return ids[-steps:], logits, chosen


def _wren(folder: Path, ids: list[int], steps: int):
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.models.experts import Experts

    model = TorchBackend("cpu").load(folder, dtype="float32", compile=False)
    experts = [layer.feed_forward for layer in model._model.layers]
    assert all(isinstance(e, Experts) for e in experts)
    for e in experts:
        e.record = []
    logits = [model.prefill(ids, 0)]
    out = [int(logits[0].argmax())]
    for i in range(steps - 1):
        logits.append(model.decode(out[-1], len(ids) + i))
        out.append(int(logits[-1].argmax()))
    chosen = {i: torch.cat(e.record) for i, e in enumerate(experts)}
    return out, logits, chosen


def test_imported_gguf_answers_and_routes_as_transformers_does(folder):
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["num_experts"], config["num_experts_per_tok"]) == ("qwen3_moe", 16, 4)
    transformers = pytest.importorskip("transformers")
    hf_tok = transformers.AutoTokenizer.from_pretrained(DATA / "hf")
    rendered = hf_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    tok = Tokenizer.from_dir(folder)
    assert tok.render_chat(MESSAGES) == rendered
    ids = tok.encode_chat(MESSAGES)
    assert ids == hf_tok(rendered, add_special_tokens=False)["input_ids"]

    want_tokens, want, want_experts = _transformers(ids, STEPS)
    got_tokens, got, got_experts = _wren(folder, ids, STEPS)
    assert got_tokens == want_tokens
    for a, b in zip(got, want, strict=True):
        assert np.abs(a - b).max() < FP32_TOL, np.abs(a - b).max()
        assert b.std() > 0.5  # the fixture's logits are not flat
    assert len(set(want_tokens)) > 2
    positions = len(ids) + STEPS - 1
    for layer, theirs in want_experts.items():
        ours = got_experts[layer]
        assert ours.shape == theirs.shape == (positions, 4)
        # the same set of 4 per token (each side orders its top 4 by weight)
        assert torch.equal(ours.sort(dim=1).values, theirs.sort(dim=1).values), layer
    # the routing is not trivial: tokens spread over most of the experts
    assert len(torch.unique(want_experts[0])) >= 12


def test_thinking_and_tool_format_are_qwen3s():
    from wren.engine.inference import families
    from wren.engine.inference.families.family import ReasoningFormat

    family = families.by_architecture("qwen3moe")
    assert family is families.by_model_type("qwen3_moe")
    assert family.reasoning is ReasoningFormat.THINK_TAGS
    assert family.tool_format is families.by_model_type("qwen3").tool_format
    assert family.experts and family.qk_norm and not family.permuted_qk


# --- bad files ---------------------------------------------------------------------------------


def _rewrite(dest: Path, *, shapes: dict[str, tuple[int, ...]] | None = None, meta: dict | None = None) -> Path:
    """The fixture again, with tensors cut to `shapes` (numpy order) or metadata replaced."""
    import gguf

    reader = gguf.GGUFReader(str(DATA / "model.gguf"))
    writer = gguf.GGUFWriter(str(dest), "qwen3moe")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        sub = field.types[-1] if len(field.types) > 1 else None
        value = (meta or {}).get(field.name, field.contents())
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub)
    for tensor in reader.tensors:
        data = np.array(tensor.data)
        if tensor.name in (shapes or {}):
            data = np.ascontiguousarray(data[tuple(slice(0, n) for n in shapes[tensor.name])])
        writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest


@pytest.mark.parametrize(("tensor", "shape", "words"), [
    ("blk.1.ffn_gate_inp.weight", (15, 64), "qwen3moe.expert_count 16"),  # router: one expert short
    ("blk.0.ffn_up_exps.weight", (16, 31, 64), "qwen3moe.expert_feed_forward_length 32"),
    ("blk.1.ffn_down_exps.weight", (12, 64, 32), "qwen3moe.expert_count 16"),  # 12 experts in the tensor
])
def test_misshapen_router_or_experts_are_refused_naming_the_tensor(tmp_path, tensor, shape, words):
    bad = _rewrite(tmp_path / "bad.gguf", shapes={tensor: shape})
    registry = ModelRegistry(tmp_path / "models")
    with pytest.raises(ModelFileError, match=rf"{tensor}.*{words}"):
        registry.import_gguf(bad, "bad")
    assert not any((tmp_path / "models").rglob("*.gguf"))  # nothing half-imported left


def test_expert_count_unlike_the_tensors_is_refused(tmp_path):
    bad = _rewrite(tmp_path / "bad.gguf", meta={"qwen3moe.expert_count": 8})
    with pytest.raises(ModelFileError, match=r"tensor blk\.0\.ffn_\w+\.weight has shape \[16, .*"
                                             r"but the metadata make it \[8, .*qwen3moe\.expert_count 8"):
        ModelRegistry(tmp_path / "models").import_gguf(bad, "bad")


def test_more_experts_per_token_than_experts_is_refused(tmp_path):
    bad = _rewrite(tmp_path / "bad.gguf", meta={"qwen3moe.expert_used_count": 17})
    with pytest.raises(ModelFileError, match=r"qwen3moe\.expert_used_count is 17; it must be between 1 and 16"):
        ModelRegistry(tmp_path / "models").import_gguf(bad, "bad")


def test_mlx_matches_torch(folder):
    """MLX runs the imported file through mlx-lm's qwen3_moe (its SwitchGLU takes the
    experts under the family's names) with torch's tokens and logits."""
    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.backends.torch import TorchBackend

    if not MLXBackend().available():
        pytest.skip("mlx is not installed")
    ids = Tokenizer.from_dir(folder).encode_chat(MESSAGES)
    runs = []
    for model in (TorchBackend("cpu").load(folder, dtype="float32", compile=False),
                  MLXBackend().load(folder, dtype="float32")):
        logits = [model.prefill(ids, 0)]
        tokens = [int(logits[0].argmax())]
        for i in range(5):
            logits.append(model.decode(tokens[-1], len(ids) + i))
            tokens.append(int(logits[-1].argmax()))
        runs.append((tokens, logits))
    (t_tokens, t_logits), (m_tokens, m_logits) = runs
    assert t_tokens == m_tokens
    assert max(np.abs(a - b).max() for a, b in zip(t_logits, m_logits, strict=True)) < FP32_TOL


def test_experts_are_mapped_copy_on_write_by_default(folder):
    """By default the 3-D expert tensors are views of the file's pages (weights.MAP_EXPERTS:
    not read into memory); a write to one stays in this process, never in the file."""
    import hashlib
    import os

    from wren.engine.inference.models import weights

    if os.environ.get("WREN_MAP_EXPERTS"):
        pytest.skip("WREN_MAP_EXPERTS is set for this run")
    assert weights.MAP_EXPERTS
    path = folder / "model.gguf"
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    config = json.loads((folder / "config.json").read_text())
    opened = weights.GGUFWeights(path, config)
    gate = opened.get("model.layers.0.mlp.switch_mlp.gate_proj.weight")
    assert gate.shape == (16 * 32, 64)
    info = opened._plan["model.layers.0.mlp.switch_mlp.gate_proj.weight"].source
    with open(path, "rb") as f:
        f.seek(info.offset)
        assert f.read(info.n_bytes) == gate.raw.numpy().tobytes()
    gate.raw.zero_()
    opened.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
