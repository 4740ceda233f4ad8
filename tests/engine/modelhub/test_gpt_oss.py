"""gpt-oss end to end from a file Wren's tests did not make: a tiny random GptOssForCausalLM made
with transformers' own class, its experts MXFP4 values, converted by llama.cpp's
convert_hf_to_gguf.py with MXFP4 experts (tests/data/families/make_gpt_oss.py), imported as
`wren models import` imports it.

- The prompt is the real gpt-oss template's (harmony), rendered the same by Wren and transformers.
- Greedy answer equals transformers' on it, logits within FP32_TOL at every step with exact
  activations (float32 on both sides; the experts' MXFP4 values are the reference's exact
  weights), and within Q8_TOL on Wren's default path (8-bit activations for the MXFP4 experts).
  The prompt is longer than the sliding window (8), so layer 0 attends through its window.
- The router's chosen experts agree with transformers' on every token of both layers with exact
  activations (254 positions each), and on at least 95% of them on the default path.
- A misshapen sink tensor is refused at import naming the tensor.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest

from wren.engine.errors import ModelFileError
from wren.engine.modelhub import ModelRegistry
from wren.engine.tokenize import Tokenizer

torch = pytest.importorskip("torch")

DATA = Path(__file__).resolve().parents[2] / "data" / "families" / "gpt_oss"
# Exact activations (float32 on both sides, the MXFP4 experts' exact values): measured at most
# 1.3e-5 on logits with std > 0.5.
FP32_TOL = 1e-4
# Wren's default decoding rounds the activations of quantized weights to 8 bits per 32 values
# (the MXFP4 experts here; the rest of the fixture is F32): measured at most 0.15.
Q8_TOL = 0.4
# MLX against torch, both float32 with the same weights (see test_mlx_matches_torch)
MLX_TOL = 1e-3
STEPS = 10
MESSAGES = [
    {"role": "system", "content": "You are a small brown bird with a loud voice."},
    {"role": "user", "content": "What is the capital of France? Please write a short poem about the sea."},
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return ModelRegistry(tmp_path_factory.mktemp("gpt_oss")).import_gguf(DATA / "model.gguf", "gpt-oss").path


def _transformers(ids: list[int], steps: int):
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
        hooks = [layer.mlp.router.register_forward_hook(
                 lambda _m, _i, out, i=i: chosen.__setitem__(i, out[2].clone()))
                 for i, layer in enumerate(model.model.layers)]
        model(torch.tensor([ids[:-1]]))
        for hook in hooks:
            hook.remove()
    return ids[-steps:], logits, chosen


def _wren(folder: Path, ids: list[int], steps: int, exact: bool):
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.models.experts import Experts
    from wren.engine.inference.quant.modules import exact_activations

    model = TorchBackend("cpu").load(folder, dtype="float32", compile=False)
    experts = [layer.feed_forward for layer in model._model.layers]
    assert all(isinstance(e, Experts) for e in experts)
    assert [layer.attention.window for layer in model._model.layers] == [8, None]
    for e in experts:
        e.record = []
    with exact_activations() if exact else contextlib.nullcontext():
        logits = [model.prefill(ids, 0)]
        out = [int(logits[0].argmax())]
        for i in range(steps - 1):
            logits.append(model.decode(out[-1], len(ids) + i))
            out.append(int(logits[-1].argmax()))
    return out, logits, {i: torch.cat(e.record) for i, e in enumerate(experts)}


def test_imported_gguf_answers_and_routes_as_transformers_does(folder):
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["num_local_experts"], config["num_experts_per_tok"]) == ("gpt_oss", 32, 4)
    transformers = pytest.importorskip("transformers")
    hf_tok = transformers.AutoTokenizer.from_pretrained(DATA / "hf")
    rendered = hf_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    tok = Tokenizer.from_dir(folder)
    assert tok.render_chat(MESSAGES) == rendered
    assert rendered.endswith("<|start|>assistant")
    ids = tok.encode_chat(MESSAGES)
    assert ids == hf_tok(rendered, add_special_tokens=False)["input_ids"]
    assert len(ids) > 8  # past the sliding window

    want_tokens, want, want_experts = _transformers(ids, STEPS)
    for exact, tolerance in ((True, FP32_TOL), (False, Q8_TOL)):
        got_tokens, got, got_experts = _wren(folder, ids, STEPS, exact)
        assert got_tokens == want_tokens, exact
        worst = max(float(np.abs(a - b).max()) for a, b in zip(got, want, strict=True))
        assert worst < tolerance, (exact, worst)
        positions = len(ids) + STEPS - 1
        for layer, theirs in want_experts.items():
            ours = got_experts[layer]
            assert ours.shape == theirs.shape == (positions, 4)
            # the same set of 4 per token (each side orders its top 4 by weight)
            same = (ours.sort(dim=1).values == theirs.sort(dim=1).values).all(dim=1)
            if exact:
                assert bool(same.all()), (layer, (~same).nonzero().flatten().tolist())
            else:  # 8-bit activations move near-tied router logits: measured 248 of 254 in layer 1
                assert float(same.float().mean()) >= 0.95, (layer, int(same.sum()), positions)
    assert all(b.std() > 0.5 for b in want)  # the fixture's logits are not flat
    assert len(set(want_tokens)) > 2
    assert len(torch.unique(want_experts[0])) >= 20  # the tokens spread over most of the 32


def test_a_misshapen_sink_tensor_is_refused_naming_it(tmp_path):
    import gguf

    reader = gguf.GGUFReader(str(DATA / "model.gguf"))
    dest = tmp_path / "bad.gguf"
    writer = gguf.GGUFWriter(str(dest), "gpt-oss")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        sub = field.types[-1] if len(field.types) > 1 else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    for tensor in reader.tensors:
        data = np.array(tensor.data)
        if tensor.name == "blk.1.attn_sinks.weight":
            data = np.ascontiguousarray(data[:3])
        raw = tensor.tensor_type if tensor.tensor_type == gguf.GGMLQuantizationType.MXFP4 else None
        writer.add_tensor(tensor.name, data, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelFileError, match=r"blk\.1\.attn_sinks\.weight has shape \[3\].*head_count 4"):
        ModelRegistry(tmp_path / "models").import_gguf(dest, "bad")


def test_mlx_matches_torch(folder, tmp_path):
    """mlx-lm's gpt_oss module on the same file: the experts in MLX's own mxfp4 layout (the
    file's exact values), the sinks and router as mlx-lm names them; greedy tokens and logits as
    torch's with exact activations. mlx-lm's YaRN always rounds the ramp's ends out (floor and
    ceil, as llama.cpp does) where gpt-oss's config says not to (truncate false): torch is run
    with that rounding for the comparison, and without it the two differ (by 0.89 here)."""
    import shutil

    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.quant.modules import exact_activations

    if not MLXBackend().available():
        pytest.skip("mlx is not installed")
    rounded = tmp_path / "rounded"
    shutil.copytree(folder, rounded)
    config = json.loads((rounded / "config.json").read_text())
    assert config["rope_scaling"]["truncate"] is False
    config["rope_scaling"]["truncate"] = True
    (rounded / "config.json").write_text(json.dumps(config))
    ids = Tokenizer.from_dir(folder).encode_chat(MESSAGES)
    results = []
    for model in (TorchBackend("cpu").load(rounded, dtype="float32", compile=False),
                  MLXBackend().load(folder, dtype="float32"),
                  TorchBackend("cpu").load(folder, dtype="float32", compile=False)):
        with exact_activations():
            logits = [model.prefill(ids, 0)]
            tokens = [int(logits[0].argmax())]
            for i in range(5):
                logits.append(model.decode(tokens[-1], len(ids) + i))
                tokens.append(int(logits[-1].argmax()))
        results.append((tokens, logits))
    (t_tokens, t_logits), (m_tokens, m_logits), (_, exact_logits) = results
    assert t_tokens == m_tokens
    worst = max(float(np.abs(a - b).max()) for a, b in zip(t_logits, m_logits, strict=True))
    assert worst < MLX_TOL, worst
    assert max(float(np.abs(a - b).max()) for a, b in zip(exact_logits, m_logits, strict=True)) > 100 * MLX_TOL
