"""phi3, granite and smollm3 end to end, from files Wren's tests did not make: tiny random
Hugging Face models (transformers' own classes) converted by llama.cpp's convert_hf_to_gguf.py
(tests/data/families/make_tiny.py made both; each folder holds the family's real chat
template, from llama.cpp's models/templates/).

- The GGUF, imported as `wren models import` imports it, answers greedily with transformers'
  tokens on the same rendered prompt, its logits within FP32_TOL of transformers' at every
  step (float32 weights and activations on both sides).
- The HF folder itself (safetensors) runs the same on Wren's torch model.
- MLX (mlx-lm's class of the family) gives torch's logits within FP32_TOL.
- The real template renders in Wren's sandbox, and the token that closes its assistant turn
  is one Wren stops on.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wren.engine.modelhub import ModelRegistry
from wren.engine.tokenize import Tokenizer

torch = pytest.importorskip("torch")

DATA = Path(__file__).resolve().parents[2] / "data" / "families"
FAMILIES = ("phi3", "granite", "smollm3")
# float32 on both sides; measured: at most ~2e-6 on logits with std 0.7-7.
FP32_TOL = 1e-4
STEPS = 12
MESSAGES = [
    {"role": "system", "content": "You are a small brown bird with a loud voice."},
    {"role": "user", "content": "What is the capital of France? Please write a short poem about the sea."},
]
# The token each family's template closes an assistant turn with.
END_OF_TURN = {"phi3": "<|end|>", "granite": "<|end_of_text|>", "smollm3": "<|im_end|>"}
# The tiny phi3's whole context: its default is the pretraining length, 32 (LongRoPE's short
# factors, engine/inference/models/args.py), and these prompts run past it (the long factors).
WHOLE = {"phi3": {"context_length": 256}}


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, Path]:
    registry = ModelRegistry(tmp_path_factory.mktemp("families"))
    return {family: registry.import_gguf(DATA / family / "model.gguf", family).path for family in FAMILIES}


def _transformers_greedy(hf_dir: Path, ids: list[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    ids, logits = list(ids), []
    with torch.no_grad():
        for _ in range(steps):  # whole sequence each step: transformers' own path, no cache
            row = model(torch.tensor([ids])).logits[0, -1].numpy()
            logits.append(row)
            ids.append(int(row.argmax()))
    return ids[-steps:], logits


def _wren_greedy(model, ids: list[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    logits = [model.prefill(ids, 0)]
    out = [int(logits[0].argmax())]
    for i in range(steps - 1):
        logits.append(model.decode(out[-1], len(ids) + i))
        out.append(int(logits[-1].argmax()))
    return out, logits


def _prompt(folder: Path) -> list[int]:
    return Tokenizer.from_dir(folder).encode_chat(MESSAGES)


@pytest.mark.parametrize("family", FAMILIES)
def test_imported_gguf_answers_as_transformers_does(family, imported):
    from wren.engine.inference.backends.torch import TorchBackend

    folder = imported[family]
    assert json.loads((folder / "config.json").read_text())["model_type"] == family
    ids = _prompt(folder)
    transformers = pytest.importorskip("transformers")
    hf_tok = transformers.AutoTokenizer.from_pretrained(DATA / family / "hf")
    rendered = hf_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert Tokenizer.from_dir(folder).render_chat(MESSAGES) == rendered
    assert ids == hf_tok(rendered, add_special_tokens=False)["input_ids"]
    if family == "phi3":
        assert len(ids) > 32  # past the pretraining length: transformers takes the long factors too

    want_tokens, want = _transformers_greedy(DATA / family / "hf", ids, STEPS)
    model = TorchBackend("cpu").load(folder, dtype="float32", compile=False, **WHOLE.get(family, {}))
    got_tokens, got = _wren_greedy(model, ids, STEPS)
    assert got_tokens == want_tokens
    for a, b in zip(got, want, strict=True):
        assert np.abs(a - b).max() < FP32_TOL, np.abs(a - b).max()
        assert b.std() > 0.5  # the fixture's logits are not flat
    assert len(set(want_tokens)) > 2  # nor its answer one token repeated


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_folder_runs_on_the_torch_model(family):
    from wren.engine.inference.backends.torch import TorchBackend

    hf_dir = DATA / family / "hf"
    ids = list(range(3, 43))
    want_tokens, want = _transformers_greedy(hf_dir, ids, 4)
    got_tokens, got = _wren_greedy(TorchBackend("cpu").load(hf_dir, dtype="float32", compile=False,
                                                             **WHOLE.get(family, {})), ids, 4)
    assert got_tokens == want_tokens
    assert max(np.abs(a - b).max() for a, b in zip(got, want, strict=True)) < FP32_TOL


def test_phi3_short_factors_within_the_pretraining_length():
    """A cache no longer than the pretraining length (32 here) turns by the short factors, as
    transformers does for a sequence that short; the long ones would give other logits."""
    from wren.engine.inference.backends.torch import TorchBackend

    hf_dir = DATA / "phi3" / "hf"
    ids = list(range(3, 23))
    want_tokens, want = _transformers_greedy(hf_dir, ids, 3)
    short = TorchBackend("cpu").load(hf_dir, dtype="float32", compile=False, context_length=32)
    got_tokens, got = _wren_greedy(short, ids, 3)
    assert got_tokens == want_tokens
    assert max(np.abs(a - b).max() for a, b in zip(got, want, strict=True)) < FP32_TOL
    long = TorchBackend("cpu").load(hf_dir, dtype="float32", compile=False, context_length=64)
    assert np.abs(long.prefill(ids, 0) - want[0]).max() > 100 * FP32_TOL


@pytest.mark.parametrize("family", FAMILIES)
def test_mlx_matches_torch(family, imported):
    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.backends.torch import TorchBackend

    if not MLXBackend().available():
        pytest.skip("mlx is not installed")
    folder = imported[family]
    ids = _prompt(folder)
    t = TorchBackend("cpu").load(folder, dtype="float32", compile=False, **WHOLE.get(family, {}))
    m = MLXBackend().load(folder, dtype="float32", **WHOLE.get(family, {}))
    t_tokens, t_logits = _wren_greedy(t, ids, 6)
    m_tokens, m_logits = _wren_greedy(m, ids, 6)
    assert t_tokens == m_tokens
    assert max(np.abs(a - b).max() for a, b in zip(t_logits, m_logits, strict=True)) < FP32_TOL


@pytest.mark.parametrize("family", FAMILIES)
def test_real_template_renders_and_its_turn_end_stops_the_answer(family, imported):
    tok = Tokenizer.from_dir(imported[family])
    template = (DATA / family / "chat_template.jinja").read_text(encoding="utf-8")
    assert tok.chat_template == template  # the converter carried it into the GGUF unchanged
    chat = [*MESSAGES, {"role": "assistant", "content": "Paris, by the sea."}]
    rendered = tok.render_chat(chat, add_generation_prompt=False)
    end = END_OF_TURN[family]
    assert "Paris, by the sea." + end in rendered
    assert tok._id(end) in tok.eos_ids  # the answer's end is a stop token
    prompt = tok.render_chat(MESSAGES)
    assert prompt.count(end) == rendered.count(end) - 1  # the open turn is not closed


def test_smollm3_thinks_in_tags_and_its_template_turns_it_off():
    from wren.engine.inference import families
    from wren.engine.inference.families.family import ReasoningFormat

    assert families.by_model_type("smollm3").reasoning is ReasoningFormat.THINK_TAGS
    tok = Tokenizer(DATA / "smollm3" / "hf" / "tokenizer.json",
                    {"chat_template": (DATA / "smollm3" / "chat_template.jinja").read_text(encoding="utf-8")})
    assert tok.render_chat(MESSAGES).endswith("<|im_start|>assistant\n")  # thinking: the model opens it
    off = tok.render_chat([{"role": "system", "content": "Be brief. /no_think"}, MESSAGES[1]])
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n") and "Reasoning Mode: /no_think" in off


def _rewrite(source: Path, dest: Path, *, drop: str = "", shorten: str = "", retype: str = "") -> Path:
    """`source` again with one tensor left out, one row (or value) short, or written as Q8_1
    blocks (a type Wren does not run); metadata copied as they are."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(dest), str(reader.fields["general.architecture"].contents()))
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        sub = field.types[-1] if len(field.types) > 1 else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    for tensor in reader.tensors:
        data = np.array(tensor.data)
        if tensor.name == drop:
            continue
        if tensor.name == shorten:
            data = data[:-1]
        if tensor.name == retype:
            q8_1 = gguf.GGMLQuantizationType.Q8_1
            shape = gguf.quants.quant_shape_to_byte_shape(data.shape, q8_1)
            writer.add_tensor(tensor.name, np.zeros(shape, dtype=np.uint8), raw_dtype=q8_1)
            continue
        writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest


BAD_FILES = [
    ("phi3", {"drop": "blk.1.attn_qkv.weight"}, "phi3.block_count is 2, but tensor blk.1.attn_qkv.weight is missing"),
    ("phi3", {"shorten": "blk.0.ffn_up.weight"},
     "tensor blk.0.ffn_up.weight has shape [127, 48], but the metadata make it [128, 48] "
     "(2 x phi3.feed_forward_length 64, phi3.embedding_length 48)"),
    ("phi3", {"shorten": "blk.0.attn_qkv.weight"}, "tensor blk.0.attn_qkv.weight has shape [79, 48], but the "
     "metadata make it [80, 48] (phi3.attention.head_count 3 x head size 16 + 2 x phi3.attention.head_count_kv 1"),
    ("phi3", {"shorten": "rope_factors_long.weight"}, "tensor rope_factors_long.weight has shape [5], but the "
     "metadata make it [6] (half of phi3.rope.dimension_count 12)"),
    ("phi3", {"drop": "rope_factors_short.weight"}, "has rope_factors_long.weight but not rope_factors_short.weight"),
    ("granite", {"drop": "blk.0.ffn_gate.weight"}, "granite.block_count is 2, but tensor blk.0.ffn_gate.weight is missing"),
    ("granite", {"shorten": "blk.1.attn_q.weight"}, "tensor blk.1.attn_q.weight has shape [47, 48], but the metadata "
     "make it [48, 48] (granite.attention.head_count 3 x head size 16, granite.embedding_length 48)"),
    ("smollm3", {"drop": "blk.3.attn_k.weight"}, "smollm3.block_count is 4, but tensor blk.3.attn_k.weight is missing"),
    ("smollm3", {"shorten": "blk.2.attn_output.weight"}, "tensor blk.2.attn_output.weight has shape [47, 48]"),
]


@pytest.mark.parametrize(("family", "change", "message"), BAD_FILES)
def test_a_missing_or_misshapen_tensor_is_refused_naming_family_and_tensor(family, change, message, tmp_path):
    from wren.engine.errors import ModelFileError

    bad = _rewrite(DATA / family / "model.gguf", tmp_path / "bad.gguf", **change)
    registry = ModelRegistry(tmp_path / "models")
    with pytest.raises(ModelFileError) as err:
        registry.import_gguf(bad, family)
    assert message in str(err.value)
    assert registry.list() == []  # nothing half-installed


@pytest.mark.parametrize(("family", "tensor"), [("phi3", "blk.0.ffn_down.weight"), ("granite", "blk.1.ffn_down.weight"),
                                                ("smollm3", "blk.3.ffn_down.weight")])
def test_an_unsupported_quantization_is_refused_naming_tensor_and_type(family, tensor, tmp_path):
    from wren.engine.errors import UnsupportedQuantization

    bad = _rewrite(DATA / family / "model.gguf", tmp_path / "bad.gguf", retype=tensor)
    with pytest.raises(UnsupportedQuantization, match=f"tensor {tensor} is Q8_1, which Wren cannot run"):
        ModelRegistry(tmp_path / "models").import_gguf(bad, family)


def test_phi4_minis_gpt4o_pre_tokenizer_splits_as_o200k(kit, tmp_path):
    """Phi-4-mini's GGUF names its pre-tokenizer "gpt-4o" (o200k's split): digits in threes,
    contractions kept on their word in any case, a punctuation run taking its line breaks."""
    from wren.engine.modelhub.gguf_tokenizer import build_tokenizer

    tokens, types, merges = kit.tiny_vocab()
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-4o", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges}
    tokenizer, _ = build_tokenizer(meta, tmp_path / "phi4.gguf", 256)
    pieces = [p for p, _ in tokenizer.pre_tokenizer.pre_tokenize_str("HELLO World, I'VE got 12345 a/b//\n\n x")]
    byte = kit.byte_level_alphabet()
    assert pieces == [w.replace(" ", byte[32]).replace("\n", byte[10]) for w in
                      ["HELLO", " World", ",", " I'VE", " got", " ", "123", "45", " a", "/b", "//\n\n", " x"]]


def test_phi3_sliding_window(tmp_path):
    """Phi-3-mini's window (2047 of 4096) covers every layer; Phi-3.5-mini's 262144 is longer
    than its context and so no window. A window of 8 over a 40-token prompt agrees with
    transformers."""
    import shutil

    from wren.engine.inference import families
    from wren.engine.inference.backends.torch import TorchBackend

    windows = families.by_model_type("phi3").sliding_windows
    assert windows({"sliding_window": 2047, "max_position_embeddings": 4096}, 2) == (2047, 2047)
    assert windows({"sliding_window": 262144, "max_position_embeddings": 131072}, 2) == (None, None)
    assert windows({"sliding_window": None}, 2) == (None, None)
    hf_dir = shutil.copytree(DATA / "phi3" / "hf", tmp_path / "phi3")
    config = json.loads((hf_dir / "config.json").read_text())
    (hf_dir / "config.json").write_text(json.dumps(config | {"sliding_window": 8}))
    ids = list(range(3, 43))
    want_tokens, want = _transformers_greedy(hf_dir, ids, 4)
    got_tokens, got = _wren_greedy(TorchBackend("cpu").load(hf_dir, dtype="float32", compile=False,
                                                             **WHOLE["phi3"]), ids, 4)
    assert got_tokens == want_tokens
    assert max(np.abs(a - b).max() for a, b in zip(got, want, strict=True)) < FP32_TOL
    full = TorchBackend("cpu").load(DATA / "phi3" / "hf", dtype="float32", compile=False, **WHOLE["phi3"])
    assert np.abs(full.prefill(ids, 0) - want[0]).max() > 100 * FP32_TOL  # the window mattered


def test_phi3_q8_0_fused_blocks_compute_what_the_file_holds(tmp_path):
    """llama.cpp's Q8_0 conversion of a phi3 (fused attn_qkv and ffn_up blocks): Wren's
    kernels on the file's blocks, with float32 activations, give transformers' logits for the
    file's own values (dequantized and loaded into transformers' Phi3 model)."""
    transformers = pytest.importorskip("transformers")
    from wren.engine.inference.backends import read_model_config
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.models.weights import dense, open_weights
    from wren.engine.inference.quant.modules import QuantLinear, exact_activations

    folder = ModelRegistry(tmp_path).import_gguf(DATA / "phi3" / "model-q8_0.gguf", "phi3-q8").path
    config = read_model_config(folder)
    hf_config = transformers.AutoConfig.for_model(**(config | {"pad_token_id": None}))  # Phi3Config's is 32000
    reference = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    source = open_weights(folder, config)
    get = dense(source.get, "cpu", torch.float32)
    reference.load_state_dict({name: get(name) for name in reference.state_dict()}, strict=True)
    source.close()

    model = TorchBackend("cpu").load(folder, dtype="float32", compile=False, **WHOLE["phi3"])
    assert isinstance(model._model.layers[0].attention.wqkv, QuantLinear)  # the file's blocks, fused
    ids = _prompt(folder)
    want: list[np.ndarray] = []
    seq = list(ids)
    with torch.no_grad():
        for _ in range(6):
            want.append(reference(torch.tensor([seq])).logits[0, -1].numpy())
            seq.append(int(want[-1].argmax()))
    with exact_activations():
        got_tokens, got = _wren_greedy(model, ids, 6)
    assert got_tokens == seq[len(ids):]
    assert max(np.abs(a - b).max() for a, b in zip(got, want, strict=True)) < FP32_TOL


def test_compiled_decode_groups_layers_by_what_a_graph_bakes_in():
    """A compiled block bakes in Python constants: smollm3's layer without RoPE needs a graph
    of its own (one graph for all four layers fails its guards there, and the whole group
    fell back to eager decoding), and granite's scales belong in a saved graph's key."""
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.models.decode import _layers_by_shape

    smollm3 = TorchBackend("cpu").load(DATA / "smollm3" / "hf", dtype="float32", compile=False)._model
    groups = _layers_by_shape(smollm3)
    layers = list(smollm3.layers)
    assert [[layers.index(layer) for layer in group] for group in groups] == [[0, 1, 2], [3]]
    granite = TorchBackend("cpu").load(DATA / "granite" / "hf", dtype="float32", compile=False)._model
    window, rotary, q_scale, residual = granite.layers[0].compiled_traits()[:4]
    assert (window, rotary, residual) == (None, 16, 0.22) and q_scale == pytest.approx(0.15 * 16**0.5)
