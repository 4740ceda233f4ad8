"""Make the tiny qwen3moe fixture in tests/data/families/qwen3moe/: a random Hugging Face
Qwen3-MoE (transformers' own Qwen3MoeConfig and model class: 2 layers, 16 experts, 4 a
token, renormalised routing as Qwen3-30B-A3B's config has it) saved with the small
byte-level BPE tokenizer and Qwen3's real chat template (llama.cpp's
models/templates/Qwen-Qwen3-0.6B.jinja, copied beside it), and the same model converted by
llama.cpp's convert_hf_to_gguf.py to qwen3moe/model.gguf (F32), as make_tiny.py does for
the other families. Run once, by hand (see make_tiny.py for where the converter comes from):

    .venv/bin/python tests/data/families/make_qwen3moe.py /tmp/lcpp/llama_cpp_python-*/vendor/llama.cpp

The router's weights are drawn larger than the rest, so its top 4 of 16 are well apart and a
float32 rounding difference cannot swap two experts (the test checks every choice).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_tiny  # noqa: E402

make_tiny.FAMILIES["qwen3moe"] = {
    "config": lambda vocab: transformers.Qwen3MoeConfig(
        vocab_size=vocab, num_hidden_layers=2, tie_word_embeddings=False, hidden_size=64, intermediate_size=96,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6,
        num_experts=16, num_experts_per_tok=4, moe_intermediate_size=32, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[]),
    "model": transformers.Qwen3MoeForCausalLM,
    "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
                 "</tool_call>"],
    "bos": None, "eos": "<|im_end|>",
    "tokenizer_class": "PreTrainedTokenizerFast",
}


def randomize(model: torch.nn.Module, seed: int) -> None:
    """make_tiny's spread for every weight, scaled by its input width (the last dimension of
    the 3-D expert tensors); the router 4x wider apart."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if param.dim() == 1:
                param.copy_(1.0 + 0.2 * noise)
            elif "embed_tokens" in name:
                param.copy_(noise)
            else:
                boost = 4.0 if name.endswith("mlp.gate.weight") else 1.0
                param.copy_(noise * 1.5 * boost / param.shape[-1] ** 0.5)


def main() -> None:
    llama_cpp = Path(sys.argv[1])
    make_tiny.randomize = randomize
    hf_dir = HERE / "qwen3moe" / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    make_tiny.make_hf("qwen3moe", hf_dir)
    make_tiny.convert(llama_cpp, hf_dir, HERE / "qwen3moe" / "model.gguf")
    print("qwen3moe ->", HERE / "qwen3moe")


if __name__ == "__main__":
    main()
