"""Make the tiny gemma3 and olmo2 fixtures in tests/data/families/<family>/ the way
make_tiny.py makes phi3's, granite's and smollm3's (same tokenizer, random weights and
converter: see there): a random Hugging Face model of transformers' own class, saved with
the family's real chat template, and converted by llama.cpp's convert_hf_to_gguf.py.

    .venv/bin/python tests/data/families/make_gemma3_olmo2.py /tmp/lcpp/llama_cpp_python-*/vendor/llama.cpp

gemma3: six layers, so llama.cpp's default pattern (every sixth layer global; the GGUF
does not record it) gives layers 0-4 a sliding window and layer 5 full attention, as
transformers' does. The window (8) is shorter than the test prompts; the two RoPE bases
differ, the global one is scaled (linear, factor 8, as Gemma 3 4B-27B), and the final
logits are soft-capped (Gemma 3's configs carry null there; the converter and llama.cpp
support it, so does Wren). The query scale is the head size, which is what llama.cpp
assumes for any Gemma 3 but the 27B.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_tiny  # noqa: E402

GEMMA3_WINDOW = 8

make_tiny.FAMILIES["gemma3"] = {
    "config": lambda vocab: transformers.Gemma3TextConfig(
        vocab_size=vocab, num_hidden_layers=6, hidden_size=48, intermediate_size=64, num_attention_heads=3,
        num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, max_position_embeddings=1024,
        rms_norm_eps=1e-6, sliding_window=GEMMA3_WINDOW, rope_theta=20000.0, rope_local_base_freq=500.0,
        rope_scaling={"rope_type": "linear", "factor": 8.0}, final_logit_softcapping=15.0,
        tie_word_embeddings=True),
    "model": transformers.Gemma3ForCausalLM,
    "specials": ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"],
    "bos": "<bos>", "eos": "<eos>",
    "tokenizer_class": "PreTrainedTokenizerFast",
}
make_tiny.FAMILIES["olmo2"] = {
    "config": lambda vocab: transformers.Olmo2Config(
        vocab_size=vocab, num_hidden_layers=2, tie_word_embeddings=False, **make_tiny.SIZES),
    "model": transformers.Olmo2ForCausalLM,
    "specials": ["<|endoftext|>", "<|pad|>"],
    "bos": "<|endoftext|>", "eos": "<|endoftext|>",
    "tokenizer_class": "PreTrainedTokenizerFast",
}

_randomize = make_tiny.randomize


def randomize(model, seed: int) -> None:
    """make_tiny's weights, but gemma's embeddings (scaled up by sqrt(hidden_size) on the
    way in) at 0.3 of its scale: at full scale each token's own embedding dominates the tied
    head and the answer repeats one token (measured over two seeds)."""
    _randomize(model, seed)
    if isinstance(model, transformers.Gemma3ForCausalLM):
        with torch.no_grad():
            model.model.embed_tokens.weight.mul_(0.3)


make_tiny.randomize = randomize

if __name__ == "__main__":
    if len(sys.argv) == 2:
        sys.argv += ["gemma3", "olmo2"]
    make_tiny.main()
