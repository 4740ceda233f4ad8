"""The GPU placement plan (engine/inference/placement.py): how many layers fit a GPU and how
much context its KV cache holds, from a GGUF header alone; `wren models info --json` shows it.

The 8B- and 70B-shaped files are headers only: every tensor's name, shape and type as
llama-quantize writes a Q4_K_M, and a sparse file the size the tensors need (nothing is
written there: planning never reads a weight)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as T

from wren.engine.inference.placement import (
    DEFAULT_SLOTS,
    GIB,
    RESERVE_BYTES,
    ModelBytes,
    PlanError,
    dense_model_bytes,
    gpu_budget,
    gpu_layers_from_env,
    model_bytes_from_gguf,
    parse_bytes,
    plan_layers,
)
from wren.engine.terminal.main import main

CARD_12GB = 12 * GIB


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int = 128256
    context: int = 131072


LLAMA_8B = Shape(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336)
LLAMA_70B = Shape(hidden=8192, layers=80, heads=64, kv_heads=8, ffn=28672)


def _more_bits(i: int, n: int) -> bool:
    """llama-quantize's Q4_K_M rule for attn_v and ffn_down: Q6_K in these layers."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_tensors(s: Shape) -> list[tuple[str, tuple[int, int] | tuple[int], T]]:
    kv = s.kv_heads * s.hidden // s.heads
    out: list = [("token_embd.weight", (s.vocab, s.hidden), T.Q4_K), ("output_norm.weight", (s.hidden,), T.F32),
                 ("output.weight", (s.vocab, s.hidden), T.Q6_K), ("rope_freqs.weight", (s.hidden // s.heads // 2,), T.F32)]
    for i in range(s.layers):
        more = T.Q6_K if _more_bits(i, s.layers) else T.Q4_K
        out += [(f"blk.{i}.attn_norm.weight", (s.hidden,), T.F32), (f"blk.{i}.ffn_norm.weight", (s.hidden,), T.F32),
                (f"blk.{i}.attn_q.weight", (s.hidden, s.hidden), T.Q4_K), (f"blk.{i}.attn_k.weight", (kv, s.hidden), T.Q4_K),
                (f"blk.{i}.attn_v.weight", (kv, s.hidden), more),
                (f"blk.{i}.attn_output.weight", (s.hidden, s.hidden), T.Q4_K),
                (f"blk.{i}.ffn_gate.weight", (s.ffn, s.hidden), T.Q4_K),
                (f"blk.{i}.ffn_up.weight", (s.ffn, s.hidden), T.Q4_K),
                (f"blk.{i}.ffn_down.weight", (s.hidden, s.ffn), more)]
    return out


def header_only_gguf(path: Path, s: Shape) -> Path:
    """A Q4_K_M-shaped GGUF of shape `s`: metadata and tensor infos, then a hole as long as
    the tensors' data (a sparse file: no disk is used for it)."""
    writer = GGUFWriter(str(path), "llama")
    for key, value in {"block_count": s.layers, "context_length": s.context, "embedding_length": s.hidden,
                       "feed_forward_length": s.ffn, "attention.head_count": s.heads,
                       "attention.head_count_kv": s.kv_heads}.items():
        writer.add_uint32(f"llama.{key}", value)
    writer.add_float32("llama.rope.freq_base", 500000.0)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_file_type(15)  # MOSTLY_Q4_K_M
    data = 0
    for name, shape, qtype in q4_k_m_tensors(s):
        block, size = GGML_QUANT_SIZES[qtype]
        nbytes = int(np.prod(shape)) // block * size
        writer.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        data += -(-nbytes // 32) * 32  # each tensor starts at the file's 32-byte alignment
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    with open(path, "r+b") as fh:
        fh.truncate(-(-path.stat().st_size // 32) * 32 + data)
    return path


@pytest.fixture(scope="module")
def llama_8b(tmp_path_factory) -> Path:
    return header_only_gguf(tmp_path_factory.mktemp("8b") / "model.gguf", LLAMA_8B)


@pytest.fixture(scope="module")
def llama_70b(tmp_path_factory) -> Path:
    return header_only_gguf(tmp_path_factory.mktemp("70b") / "model.gguf", LLAMA_70B)


def test_an_8b_q4_k_m_fits_a_12_gb_card_with_8k_of_context(llama_8b):
    model = model_bytes_from_gguf(llama_8b)
    assert model.layers == 32 and not model.tied and model.max_context == 131072
    # the file's blocks as stored: ~4.9 GB like the real Q4_K_M, not the 16 GB of bfloat16
    assert 4.6e9 < model.total_bytes < 5.1e9
    assert model.kv_bytes_per_token_layer == 8 * 128 * 2 * 2  # K and V, 8 KV heads of 128, bf16
    plan = plan_layers(model, CARD_12GB, slots=DEFAULT_SLOTS)
    assert plan.all_on_gpu and plan.gpu_layers == 32 and plan.head_on_gpu and plan.embed_on_gpu
    assert plan.kv_context == 8192 == plan.requested_context
    assert plan.weights_bytes == model.total_bytes and plan.cpu_weights_bytes == 0
    assert plan.kv_bytes == 32 * 4096 * DEFAULT_SLOTS * 8192  # 2 GiB: two sequences of 8k
    assert plan.weights_bytes + plan.kv_bytes + plan.reserve_bytes <= CARD_12GB
    assert "all 32 layers fit" in plan.reason


def test_a_70b_q4_k_m_is_split_on_a_12_gb_card(llama_70b):
    model = model_bytes_from_gguf(llama_70b)
    assert 39e9 < model.total_bytes < 44e9
    plan = plan_layers(model, CARD_12GB, slots=DEFAULT_SLOTS)
    assert plan.split and 10 <= plan.gpu_layers <= 25, plan
    assert plan.kv_context == 8192 and plan.head_on_gpu and not plan.embed_on_gpu  # untied: the table stays
    used = plan.weights_bytes + plan.kv_bytes + plan.reserve_bytes
    one_more = model.layer_bytes[plan.gpu_layers] + model.kv_bytes_per_token_layer * DEFAULT_SLOTS * 8192
    assert used <= CARD_12GB < used + one_more  # as many layers as fit, not one more
    assert plan.weights_bytes + plan.cpu_weights_bytes == model.total_bytes
    assert f"{plan.gpu_layers} of 80 layers" in plan.reason


def _model(layers=4, layer=GIB, kv=1 << 20, tied=False) -> ModelBytes:
    return ModelBytes(layer_bytes=(layer,) * layers, embed_bytes=GIB // 2, head_bytes=GIB // 2, tied=tied,
                      kv_bytes_per_token_layer=kv, max_context=32768)


def test_the_policy_in_small_numbers():
    m = _model()  # 4 layers of 1 GiB, 1 MiB of cache a token a layer, head 0.5 GiB
    room = GIB // 2 + RESERVE_BYTES
    # all four and the 8k cache (4 x 8 GiB) need 36.5 GiB + the reserve; two fit in 18.5
    assert plan_layers(m, room + 4 * GIB + 32 * GIB + GIB // 2).all_on_gpu  # the table too, once all are there
    two = plan_layers(m, room + 2 * (GIB + 8 * GIB))
    assert (two.gpu_layers, two.kv_context) == (2, 8192) and not two.embed_on_gpu
    # not one layer with 8k: one layer with the context that fits (at least the minimal 1024)
    short = plan_layers(m, room + GIB + 2048 * (1 << 20))
    assert (short.gpu_layers, short.kv_context) == (1, 2048) and "2048 tokens of context, not 8192" in short.reason
    # not even that: the CPU
    cpu = plan_layers(m, room + GIB + 1000 * (1 << 20))
    assert cpu.gpu_layers == 0 and not cpu.on_gpu and cpu.weights_bytes == 0 and "CPU" in cpu.reason
    # a longer context asked for costs layers; the model's own limit caps what is asked
    assert plan_layers(m, room + 2 * (GIB + 8 * GIB), context=16384).gpu_layers == 1
    assert plan_layers(m, 10**15, context=10**6).kv_context == 32768


def test_a_layer_count_asked_for_wins_and_the_cache_takes_what_is_left():
    m = _model()
    free = GIB // 2 + RESERVE_BYTES + 3 * GIB + 3 * 4096 * (1 << 20)
    plan = plan_layers(m, free, gpu_layers=3)
    assert (plan.gpu_layers, plan.kv_context) == (3, 4096) and "as asked" in plan.reason
    assert plan_layers(m, free, gpu_layers=0).gpu_layers == 0
    assert plan_layers(m, 10**15, gpu_layers=99).gpu_layers == 4  # clipped, as -ngl 99 is
    # all four and the table (5 GiB) leave 2 GiB: 512 tokens, under the minimal 1024
    with pytest.raises(PlanError, match=r"4 of 4 layers on the GPU leave room for 512 tokens.*fewer GPU layers"):
        plan_layers(m, RESERVE_BYTES + 7 * GIB, gpu_layers=4)
    with pytest.raises(PlanError, match="0 or more"):
        plan_layers(m, free, gpu_layers=-1)


def test_a_tied_table_goes_with_the_head():
    plan = plan_layers(_model(tied=True), GIB // 2 + RESERVE_BYTES + 2 * (GIB + 8 * GIB))
    assert plan.split and plan.head_on_gpu and plan.embed_on_gpu


def test_dense_weights_count_their_widened_bytes():
    config = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072}
    model = dense_model_bytes(config, 2)
    assert 15.5e9 < model.total_bytes < 16.5e9  # Llama-3.1-8B in bfloat16
    assert plan_layers(model, CARD_12GB, slots=DEFAULT_SLOTS).split


def test_sizes_and_settings_are_read_or_refused(monkeypatch):
    assert parse_bytes("12GiB") == 12 * GIB == parse_bytes(" 12 gib ")
    assert parse_bytes("8GB") == 8 * 10**9 and parse_bytes("1500MiB") == 1500 << 20 and parse_bytes("1024") == 1024
    for bad in ("twelve", "12 parsecs", "", "-3GB"):
        with pytest.raises(ValueError, match="not a memory size"):
            parse_bytes(bad)
    monkeypatch.setenv("WREN_GPU_LAYERS", "20")
    assert gpu_layers_from_env() == 20
    monkeypatch.setenv("WREN_GPU_LAYERS", "auto")
    assert gpu_layers_from_env() is None
    monkeypatch.setenv("WREN_GPU_LAYERS", "all")
    with pytest.raises(PlanError, match="WREN_GPU_LAYERS must be a number"):
        gpu_layers_from_env()
    assert gpu_budget(8 * GIB) == ("a GPU with 8.0 GiB", 8 * GIB)
    monkeypatch.setenv("WREN_GPU_MEMORY", "lots")
    with pytest.raises(PlanError, match="WREN_GPU_MEMORY"):
        gpu_budget()


def _install_header_model(home: Path, name: str, gguf: Path, s: Shape) -> None:
    """A registry folder for a header-only file (importing would read all its bytes)."""
    folder = home / "models" / name
    folder.mkdir(parents=True)
    (folder / "model.gguf").symlink_to(gguf)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": s.hidden, "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads, "intermediate_size": s.ffn,
        "vocab_size": s.vocab, "max_position_embeddings": s.context}))
    (folder / "wren.json").write_text(json.dumps({
        "source": "gguf", "architecture": "llama", "context_length": s.context, "parameters": 8_030_261_248,
        "quantization": "Q4_K_M"}))


def test_models_info_shows_the_plan_for_a_12_gb_card(wren_home, llama_8b, llama_70b, capsys, monkeypatch):
    monkeypatch.delenv("WREN_GPU_MEMORY", raising=False)
    monkeypatch.delenv("WREN_GPU_LAYERS", raising=False)
    _install_header_model(wren_home, "llama-8b", llama_8b, LLAMA_8B)
    _install_header_model(wren_home, "llama-70b", llama_70b, LLAMA_70B)
    assert main(["models", "info", "llama-8b", "--json", "--gpu-memory", "12GiB"]) == 0
    plan = json.loads(capsys.readouterr().out)["gpu_plan"]
    assert plan["device"] == "a GPU with 12.0 GiB" and plan["free_bytes"] == CARD_12GB
    assert (plan["layers"], plan["gpu_layers"], plan["kv_context"]) == (32, 32, 8192)
    assert 4.6e9 < plan["weights_bytes"] < 5.1e9 and plan["kv_bytes_per_token"] == 32 * 4096 * DEFAULT_SLOTS
    assert main(["models", "info", "llama-70b", "--json", "--gpu-memory", "12GiB"]) == 0
    plan = json.loads(capsys.readouterr().out)["gpu_plan"]
    assert 0 < plan["gpu_layers"] < plan["layers"] == 80 and plan["kv_context"] == 8192
    assert main(["models", "info", "llama-70b", "--json", "--gpu-memory", "12GiB", "--gpu-layers", "10",
                 "--context", "4096"]) == 0
    plan = json.loads(capsys.readouterr().out)["gpu_plan"]
    assert (plan["gpu_layers"], plan["requested_context"]) == (10, 4096)
    assert main(["models", "info", "llama-8b", "--gpu-memory", "12GiB"]) == 0
    assert "32 of 32 layers, 8192 tokens of context" in capsys.readouterr().out
    assert main(["models", "info", "llama-8b", "--json", "--gpu-memory", "a lot"]) == 2
    assert "--gpu-memory: 'a lot' is not a memory size" in capsys.readouterr().err
    assert main(["models", "info", "llama-70b", "--json", "--gpu-memory", "12GiB", "--gpu-layers", "80"]) == 2
    assert "fewer GPU layers" in capsys.readouterr().err
