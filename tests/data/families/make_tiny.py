"""Make the tiny phi3, granite and smollm3 fixtures in tests/data/families/<family>/: a random
Hugging Face model (transformers' own config and model classes, tiny sizes) saved with a small
byte-level BPE tokenizer and the family's real chat template (llama.cpp's
models/templates/, copied beside this script as <family>/chat_template.jinja), and the
same model converted by llama.cpp's convert_hf_to_gguf.py to <family>/model.gguf (F32).

Run once, by hand; the tests only read what it wrote (tests/engine/modelhub/
test_family_fixtures.py). llama.cpp's converter is not a dependency of Wren: it is in
the llama-cpp-python source package, e.g.

    .venv/bin/pip download llama-cpp-python --no-binary :all: --no-deps -d /tmp/lcpp
    tar xzf /tmp/lcpp/llama_cpp_python-*.tar.gz -C /tmp/lcpp
    .venv/bin/python tests/data/families/make_tiny.py /tmp/lcpp/llama_cpp_python-*/vendor/llama.cpp

The converter names a BPE pre-tokenizer by hashing how the tokenizer splits a test text;
a tokenizer trained here has no entry in its table, so it is told "gpt-2", which is what
the tokenizer's ByteLevel pre-tokenizer is. Nothing else of the converter is changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.tiny import train_tiny_tokenizer  # noqa: E402

SIZES = {"hidden_size": 48, "intermediate_size": 64, "num_attention_heads": 3, "num_key_value_heads": 1,
         "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
# Phi's LongRoPE tables: one factor per rotated pair (rotary 12 of head size 16: 6), and a
# pretraining length (32) a test prompt goes past, so transformers takes the long table.
LONGROPE = {"rope_type": "longrope", "type": "longrope",
            "short_factor": [1.0, 1.1, 1.3, 1.7, 2.2, 3.0], "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0]}

FAMILIES = {
    "phi3": {
        "config": lambda vocab: transformers.Phi3Config(
            vocab_size=vocab, num_hidden_layers=2, tie_word_embeddings=False, original_max_position_embeddings=32,
            rope_scaling=dict(LONGROPE, partial_rotary_factor=0.75, rope_theta=10000.0), partial_rotary_factor=0.75,
            sliding_window=None, **SIZES),
        "model": transformers.Phi3ForCausalLM,
        "specials": ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
        "bos": None, "eos": "<|endoftext|>",
        # Phi-4-mini's tokenizer class, which sends the converter down its BPE path
        "tokenizer_class": "GPT2Tokenizer",
    },
    "granite": {
        "config": lambda vocab: transformers.GraniteConfig(
            vocab_size=vocab, num_hidden_layers=2, tie_word_embeddings=True, embedding_multiplier=12.0,
            residual_multiplier=0.22, attention_multiplier=0.15, logits_scaling=8.0, **SIZES),
        "model": transformers.GraniteForCausalLM,
        "specials": ["<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>"],
        "bos": "<|end_of_text|>", "eos": "<|end_of_text|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    },
    "smollm3": {
        # four layers, so layer 3 attends without RoPE
        "config": lambda vocab: transformers.SmolLM3Config(
            vocab_size=vocab, num_hidden_layers=4, tie_word_embeddings=True, **SIZES),
        "model": transformers.SmolLM3ForCausalLM,
        "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "bos": None, "eos": "<|im_end|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    },
}


def tokenizer_for(specials: list[str]):
    tok = train_tiny_tokenizer()
    tok.add_special_tokens([s for s in specials if tok.token_to_id(s) is None])
    return tok


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights that give varied, well separated logits (HF's 0.02 init makes them flat).
    Granite's o_proj and down_proj are scaled up by 3 x embedding_multiplier /
    residual_multiplier, so its layers outweigh its scaled embeddings (else a tied head
    answers each token with itself)."""
    gen = torch.Generator().manual_seed(seed)
    config = model.config
    embedding = getattr(config, "embedding_multiplier", 1.0)
    residual = getattr(config, "residual_multiplier", 1.0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if param.dim() == 1:  # norms
                param.copy_(1.0 + 0.2 * noise)
            elif "embed_tokens" in name:
                param.copy_(noise)
            else:
                boost = 3 * embedding / residual if hasattr(config, "residual_multiplier") else 1.0
                out = boost if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                param.copy_(noise * 1.5 * out / param.shape[1] ** 0.5)


def make_hf(family: str, out: Path, seed: int = 5, **sizes) -> None:
    spec = FAMILIES[family]
    tok = tokenizer_for(spec["specials"])
    config = spec["config"](tok.get_vocab_size())
    for key, value in sizes.items():
        setattr(config, key, value)
    config.eos_token_id = tok.token_to_id(spec["eos"])
    config.bos_token_id = tok.token_to_id(spec["bos"]) if spec["bos"] else None
    config.pad_token_id = None
    model = spec["model"](config).float().eval()
    randomize(model, seed)
    if config.tie_word_embeddings:
        model.tie_weights()
    model.save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))
    template = (HERE / family / "chat_template.jinja").read_text(encoding="utf-8")
    tokenizer_config = {
        "tokenizer_class": spec["tokenizer_class"], "chat_template": template, "eos_token": spec["eos"],
        "bos_token": spec["bos"], "add_bos_token": False, "model_max_length": 256, "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")
    (out / "generation_config.json").unlink(missing_ok=True)


CONVERT = """
import sys
llama_cpp = sys.argv.pop(1)
sys.path[:0] = [llama_cpp + "/gguf-py", llama_cpp]
from conversion import base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
import convert_hf_to_gguf
convert_hf_to_gguf.main()
"""


def convert(llama_cpp: Path, hf_dir: Path, out: Path, outtype: str = "f32") -> None:
    subprocess.run([sys.executable, "-c", CONVERT, str(llama_cpp), str(hf_dir), "--outtype", outtype,
                    "--outfile", str(out)], check=True)


def main() -> None:
    llama_cpp = Path(sys.argv[1])
    for family in sys.argv[2:] or FAMILIES:
        hf_dir = HERE / family / "hf"
        hf_dir.mkdir(parents=True, exist_ok=True)
        make_hf(family, hf_dir)
        convert(llama_cpp, hf_dir, HERE / family / "model.gguf")
        print(family, "->", HERE / family)
        if family == "phi3":
            # Q8_0 blocks of 32 need rows of a multiple of 32: a wider phi3, its GGUF only
            # (its reference is the file's own values, read back into transformers)
            with tempfile.TemporaryDirectory() as wide:
                make_hf(family, Path(wide), hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
                convert(llama_cpp, Path(wide), HERE / family / "model-q8_0.gguf", "q8_0")


if __name__ == "__main__":
    main()
