"""Make the tiny gpt-oss fixture in tests/data/families/gpt_oss/, with MXFP4 experts, the way
make_tiny.py makes the dense families' (same tokenizer and converter: see there).

- hf/: a random GptOssForCausalLM (transformers' own class): 2 layers (a sliding window of 8,
  then full attention), 32 experts of which a token takes 4, attention sinks, YaRN (gpt-oss's
  parameters: factor 32 over 4,096 positions, no truncation), float32. Its experts' weights are
  MXFP4 values exactly: each was quantized by gguf-py and read back, so the float checkpoint
  and the MXFP4 one below hold the same numbers (the reference is exact, not an approximation).
- model.gguf: llama.cpp's convert_hf_to_gguf.py run on that model saved as the released
  checkpoints are (quantization_config mxfp4; mlp.experts.*_blocks / *_scales in transformers'
  nibble order), so the converter writes MXFP4 experts as it does for gpt-oss-20b, and F32 for
  the rest (--outtype f32).

    .venv/bin/python tests/data/families/make_gpt_oss.py /tmp/lcpp/llama_cpp_python-*/vendor/llama.cpp
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from gguf import quants
from gguf.constants import GGMLQuantizationType
from safetensors.torch import load_file, save_file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE))

import make_tiny  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>",
            "<|constrain|>"]
WINDOW = 8
YARN = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        "original_max_position_embeddings": 4096, "rope_theta": 150000.0}
MXFP4 = GGMLQuantizationType.MXFP4


def config_for(vocab: int) -> transformers.GptOssConfig:
    return transformers.GptOssConfig(
        vocab_size=vocab, num_hidden_layers=2, hidden_size=64, intermediate_size=64, head_dim=16,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=32, num_experts_per_tok=4,
        sliding_window=WINDOW, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_parameters=dict(YARN),
        tie_word_embeddings=False, attention_bias=True)


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Varied, well separated logits: norms near 1, small biases, sinks of either sign,
    weights ~ 1.5 / sqrt(fan in) (the experts' fan in is their middle dimension)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if "norm" in name:
                param.copy_(1.0 + 0.2 * noise)
            elif name.endswith("sinks"):
                param.copy_(noise)
            elif "bias" in name:
                param.copy_(0.1 * noise)
            elif "embed_tokens" in name:
                param.copy_(noise)
            elif name.endswith(("gate_up_proj", "down_proj")) and param.dim() == 3:
                param.copy_(noise * 1.5 / param.shape[1] ** 0.5)
            else:
                param.copy_(noise * 1.5 / param.shape[1] ** 0.5)


def mxfp4_rows(weight: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
    """An expert tensor [E, in, out] (transformers' layout) as MXFP4: its output rows quantized
    by gguf-py (GGUF blocks [E, out, in / 32, 17]), and the float values they hold, in the
    tensor's own layout."""
    experts, fan_in, out = weight.shape
    rows = weight.transpose(1, 2).reshape(-1, fan_in).numpy()
    blocks = quants.quantize(rows, MXFP4)
    values = quants.dequantize(blocks, MXFP4).reshape(experts, out, fan_in)
    return blocks.reshape(experts, out, fan_in // 32, 17), torch.from_numpy(values).transpose(1, 2).contiguous()


def hf_blocks(gguf_blocks: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """GGUF MXFP4 blocks -> transformers' (blocks [.., 16], scales): the same e8m0 scale byte;
    GGUF keeps value j in byte j's low nibble and value 16 + j in its high one, transformers
    values 2j and 2j + 1 in byte j."""
    scales = gguf_blocks[..., 0]
    qs = gguf_blocks[..., 1:]
    codes = np.concatenate((qs & 0x0F, qs >> 4), axis=-1)  # value order
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return torch.from_numpy(np.ascontiguousarray(packed)), torch.from_numpy(np.ascontiguousarray(scales))


def make_hf(out: Path, seed: int = 7) -> dict[str, torch.Tensor]:
    """The float model in `out`; returns the MXFP4 tensors that replace its experts' weights."""
    tok = make_tiny.tokenizer_for(SPECIALS)
    config = config_for(tok.get_vocab_size())
    config.eos_token_id = tok.token_to_id("<|return|>")
    config.bos_token_id = None
    config.pad_token_id = tok.token_to_id("<|endoftext|>")
    model = transformers.GptOssForCausalLM(config).float().eval()
    randomize(model, seed)
    quantized: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                blocks, values = mxfp4_rows(param.detach())
                param.copy_(values)  # the reference holds exactly the MXFP4 values
                quantized[name + "_blocks"], quantized[name + "_scales"] = hf_blocks(blocks)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))
    template = (ROOT / "tests" / "data" / "templates" / "openai-gpt-oss-120b.jinja").read_text(encoding="utf-8")
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template,
                        "eos_token": "<|return|>", "bos_token": None, "add_bos_token": False,
                        "model_max_length": 1024, "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")
    (out / "generation_config.json").unlink(missing_ok=True)
    return quantized


def save_mxfp4_checkpoint(hf_dir: Path, quantized: dict[str, torch.Tensor], out: Path) -> None:
    """`hf_dir`'s model as the released checkpoints are saved: experts as *_blocks/*_scales."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(hf_dir / name, out / name)
    config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": []}
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    tensors = load_file(hf_dir / "model.safetensors")
    for name in list(tensors):
        if name + "_blocks" in quantized:
            del tensors[name]
    save_file(tensors | quantized, out / "model.safetensors", metadata={"format": "pt"})


def main() -> None:
    llama_cpp = Path(sys.argv[1])
    folder = HERE / "gpt_oss"
    hf_dir = folder / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    quantized = make_hf(hf_dir)
    with tempfile.TemporaryDirectory() as tmp:
        save_mxfp4_checkpoint(hf_dir, quantized, Path(tmp))
        make_tiny.convert(llama_cpp, Path(tmp), folder / "model.gguf")
    print("gpt_oss ->", folder)


if __name__ == "__main__":
    main()
